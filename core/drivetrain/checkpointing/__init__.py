"""Checkpoints that never lose a run: atomic directories, a manifest, code-free formats."""
