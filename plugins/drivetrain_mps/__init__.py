"""The ``mps`` platform plugin: Apple silicon GPUs through torch.mps (one process)."""
