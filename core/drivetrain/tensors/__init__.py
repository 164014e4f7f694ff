"""Tensors: helpers on nested structures of tensors within one process (no process state)."""
