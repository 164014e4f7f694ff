"""Launched with ``--mixed-precision fp8 --fp8-backend ao``: the child selects torchao and reads
the recipe's launch options. Prints ``CHECK-FP8-LAUNCH <json>``."""

from __future__ import annotations

import json

import torch

from drivetrain import Accelerator

accelerator = Accelerator()
model = accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 32),
                                                torch.nn.Linear(32, 16)))
print("CHECK-FP8-LAUNCH " + json.dumps({
    "precision": accelerator.mixed_precision, "backend": accelerator.fp8_backend,
    "pad_inner_dim": accelerator.ao_recipe_handler.pad_inner_dim,
    "layers": [type(m).__name__ for m in model]}), flush=True)
