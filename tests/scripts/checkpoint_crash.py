"""Trains and saves checkpoints in a loop until killed; resumes from the newest one at start.

Used by the crash-injection test: it is killed with SIGKILL at random moments, possibly in
the middle of a save, and restarted on the same project directory.

    checkpoint_crash.py PROJECT             train (under ``drivetrain launch`` or alone)
    checkpoint_crash.py PROJECT --forking   one process per line read on stdin

With ``--forking`` the imports are paid once: for each line read, a child forked from this
process trains as above, and this process prints ``CHILD <pid>`` when it starts and
``ENDED <pid>`` once it is gone (killed, as the test does). Nothing runs in this process
before the fork but imports, so each child starts as a fresh one would.
"""

from __future__ import annotations

import os
import sys
import traceback

import torch

from drivetrain import Accelerator, ProjectConfiguration
from drivetrain.checkpointing import layout


def train(project: str) -> None:
    accelerator = Accelerator(project_config=ProjectConfiguration(
        project_dir=project, automatic_checkpoint_naming=True, total_limit=3))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 512))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    if layout.automatic_checkpoints(layout.Path(project) / "checkpoints"):
        accelerator.load_state()
        accelerator.print(f"RESUMED {accelerator.save_iteration}", flush=True)
    while True:
        accelerator.backward(model(torch.randn(8, 512, device=accelerator.device)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
        directory = accelerator.save_state()
        accelerator.print(f"SAVED {directory}", flush=True)


def forking(project: str) -> None:
    for _line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                train(project)
            except BaseException:
                traceback.print_exc()  # os._exit below would swallow it
                sys.stderr.flush()
            finally:
                os._exit(1)
        print(f"CHILD {pid}", flush=True)
        os.waitpid(pid, 0)
        print(f"ENDED {pid}", flush=True)


if __name__ == "__main__":
    if sys.argv[2:] == ["--forking"]:
        forking(sys.argv[1])
    else:
        train(sys.argv[1])
