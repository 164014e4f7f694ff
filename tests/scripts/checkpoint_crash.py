"""Trains and saves checkpoints in a loop until killed; resumes from the newest one at start.

Used by the crash-injection test: it is killed with SIGKILL at random moments, possibly in
the middle of a save, and restarted on the same project directory.
"""

from __future__ import annotations

import sys

import torch

from drivetrain import Accelerator, ProjectConfiguration
from drivetrain.checkpointing import layout

project = sys.argv[1]
accelerator = Accelerator(project_config=ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True,
                                                              total_limit=3))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 512))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = accelerator.prepare(model, optimizer)
if layout.automatic_checkpoints(layout.Path(project) / "checkpoints"):
    accelerator.load_state()
    accelerator.print(f"RESUMED {accelerator.save_iteration}", flush=True)
while True:
    accelerator.backward(model(torch.randn(8, 512)).pow(2).mean())
    optimizer.step()
    optimizer.zero_grad()
    directory = accelerator.save_state()
    accelerator.print(f"SAVED {directory}", flush=True)
