"""Checkpoints for tests and offline trials, outside the model layer (which loads them like real ones):
tiny random-weight Sapiens2 configs (tiny) and stand-ins, those configs trained on synthetic targets (train,
targets). Stand-ins, not models. One way: __main__ -> train -> tiny | targets -> sapiens2_demo.models."""
