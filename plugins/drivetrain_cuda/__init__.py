"""The ``cuda`` platform plugin: NVIDIA GPUs through torch.cuda, NCCL between processes."""
