"""Rank 1 never joins the all_reduce rank 0 waits in: the launcher's report must say so.

A collective through drivetrain first (every rank takes part), then rank 1 sleeps where rank 0
calls torch.distributed.all_reduce, with a collective timeout of 3 seconds.
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist

from drivetrain import Accelerator
from drivetrain.utils import InitProcessGroupKwargs

accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=3))])
total = accelerator.reduce(torch.ones(2), "sum")
assert total.tolist() == [2.0, 2.0], total
values = torch.arange(6, dtype=torch.float32).reshape(2, 3)
if accelerator.process_index == 1:
    time.sleep(120)  # HANG: rank 1 never arrives
dist.all_reduce(values)  # WAIT: rank 0 waits here
print("all_reduce returned", flush=True)
