"""Checkpoints: the allow-list (registry), lazy loading (manager), pre-processing + forward (inference).
Tiny and stand-in checkpoints for tests live outside this layer, in sapiens2_demo/standins."""
