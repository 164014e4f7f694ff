"""Exact resume across a kill, on 2 processes.

    check_resume.py straight  N        OUT   train N micro-steps, write what happened
    check_resume.py interrupt K        OUT   train K micro-steps, save_state(blocking=False), train on
                                             while it is written, wait for it, SIGKILL every process
    check_resume.py resume    N        OUT   load_state from OUT/checkpoint, train up to N

Shuffling is on (without asking for a seedable sampler), gradient accumulation is 2 and the
model has dropout, so the data order, the pending gradients and every RNG stream must be
restored for the end result to be bitwise identical. Each process writes its batches and
final parameters to OUT/<mode>_<rank>.pt.
"""

from __future__ import annotations

import os
import signal
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from drivetrain import Accelerator

torch.set_num_threads(1)
EPOCHS, SAMPLES, BATCH = 4, 40, 4


class Progress:
    """Where the loop is; registered for checkpointing."""

    def __init__(self) -> None:
        self.epoch = 0
        self.micro_step = 0

    def state_dict(self):
        return {"epoch": self.epoch, "micro_step": self.micro_step}

    def load_state_dict(self, state):
        self.epoch, self.micro_step = state["epoch"], state["micro_step"]


def main() -> None:
    mode, limit, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    accelerator = Accelerator(gradient_accumulation_steps=2)
    torch.manual_seed(0)
    features = torch.randn(SAMPLES, 8)
    dataset = TensorDataset(torch.arange(SAMPLES), features, features.sum(1, keepdim=True))
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2, gamma=0.9)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    if mode == "resume":
        accelerator.load_state(os.path.join(out, "checkpoint"))
    seen: list[list[int]] = []
    draws: list[float] = []
    while progress.epoch < EPOCHS and progress.micro_step < limit:
        for ids, x, y in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            seen.append(ids.tolist())
            draws.append(torch.rand(1).item())  # the global RNG stream must continue exactly
            progress.micro_step += 1
            if progress.micro_step == limit:
                break
        else:
            progress.epoch += 1
    if mode == "interrupt":
        accelerator.save_state(os.path.join(out, "checkpoint"), blocking=False)
    params = [p.detach().clone() for p in accelerator.unwrap_model(model).parameters()]
    torch.save({"seen": seen, "draws": draws, "params": params, "micro_step": progress.micro_step},
               os.path.join(out, f"{mode}_{accelerator.process_index}.pt"))
    if mode == "interrupt":
        # Training goes on while the checkpoint is written: it must hold the state at the call.
        for _ids, x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
        accelerator.wait_for_checkpoint()
    accelerator.wait_for_everyone()
    if mode == "interrupt":
        os.kill(os.getpid(), signal.SIGKILL)  # no clean shutdown: the next run starts from disk only
    print(f"CHECK-RESUME-{mode.upper()}-OK rank {accelerator.process_index}", flush=True)


if __name__ == "__main__":
    main()
