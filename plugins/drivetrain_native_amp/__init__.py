"""fp16 and bf16 through torch.autocast."""
