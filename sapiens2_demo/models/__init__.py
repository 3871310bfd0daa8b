"""Checkpoints: the allow-list (registry), lazy loading (manager), pre-processing + forward (inference),
tiny random-weight checkpoints for tests (tiny)."""
