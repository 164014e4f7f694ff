"""Processes connected by torch.distributed (gloo, nccl, ...)."""
