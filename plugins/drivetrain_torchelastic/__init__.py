"""Processes started by torchrun (torch.distributed.run) or with env:// variables."""
