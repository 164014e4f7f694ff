"""torch.compile for prepared models."""
