"""Fully Sharded Data Parallel: the ``fsdp`` strategy (torch FSDP1 and FSDP2)."""
