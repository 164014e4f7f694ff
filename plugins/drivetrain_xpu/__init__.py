"""The ``xpu`` platform plugin: Intel GPUs through torch.xpu, XCCL or oneCCL between processes."""
