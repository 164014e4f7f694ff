"""DistributedDataParallel: the automatic strategy of multi-process runs."""
