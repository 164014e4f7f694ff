"""A preemptible job written with Accelerate's API only, launched by tests/test_fault_tolerance.py.

usage: check_fault_tolerance.py OUT STRATEGY [--crash-after N] [--hang-after N] [--stop-after N] [--step-seconds S]
                                [--preempt]

STRATEGY is ddp, fsdp2 or deepspeed (ZeRO-2). Checkpoints every 3 steps under OUT (automatic naming, two kept)
and resumes from the newest at start. A shuffled loader, gradient accumulation over 2
batches and a scheduler. ``--hang-after N``: rank 1 stops itself (SIGSTOP) after step N, in
the first attempt only; ``--crash-after N``: rank 1 ends with code 17 after step N, in the
first attempt that did not hang (the first, or the second with ``--hang-after``), so that one
launch sees both faults in turn; ``--stop-after N``: every rank ends cleanly after the
checkpoint of step N; ``--preempt``: ``save_on_preemption=True``, and the main process prints
``trained step N`` after each step (the step a preemption checkpoint must hold), and each
process ``worker <rank> <pid>`` at start.
Writes OUT/seen-<world>-<rank>-<attempt>.json (the sample ids it trained on) and, at the
end, OUT/final.pt (the full parameters, from the main process).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from drivetrain import Accelerator
from drivetrain.utils import ProjectConfiguration, set_seed

# 8 steps an epoch on 2 processes: the restart after step 8 resumes mid-epoch from step 6, and a
# run stopped after step 6 leaves 8 samples of the epoch, one step on 4 processes
EPOCHS, SAMPLES, EVERY = 2, 32, 3


class Progress:
    """The script's own position, checkpointed with the rest (``register_for_checkpointing``)."""

    def __init__(self) -> None:
        self.step, self.epoch = 0, 0

    def state_dict(self) -> dict:
        return {"step": self.step, "epoch": self.epoch}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.epoch = int(state["step"]), int(state["epoch"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("strategy", choices=["ddp", "fsdp2", "deepspeed"])
    parser.add_argument("--crash-after", type=int, default=-1)
    parser.add_argument("--hang-after", type=int, default=-1)
    parser.add_argument("--stop-after", type=int, default=-1)
    parser.add_argument("--step-seconds", type=float, default=0.0,
                        help="sleep in each step until the job has resumed once (a slower first run, "
                             "that a test can interrupt while it trains)")
    parser.add_argument("--preempt", action="store_true")
    args = parser.parse_args()
    extra = {}
    if args.strategy == "fsdp2":
        from drivetrain import FullyShardedDataParallelPlugin

        extra["fsdp_plugin"] = FullyShardedDataParallelPlugin(fsdp_version=2)
    elif args.strategy == "deepspeed":
        from drivetrain import DeepSpeedPlugin

        extra["deepspeed_plugin"] = DeepSpeedPlugin(zero_stage=2)
    accelerator = Accelerator(gradient_accumulation_steps=2, project_config=ProjectConfiguration(
        project_dir=args.out, automatic_checkpoint_naming=True, total_limit=2, save_on_preemption=args.preempt),
        **extra)
    set_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2, gamma=0.9)
    data = torch.Generator().manual_seed(1)
    dataset = TensorDataset(torch.arange(SAMPLES), torch.randn(SAMPLES, 4, generator=data),
                            torch.randn(SAMPLES, 1, generator=data))
    loader = DataLoader(dataset, batch_size=2, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    step_seconds = args.step_seconds
    if os.path.isdir(os.path.join(args.out, "checkpoints")) and os.listdir(os.path.join(args.out, "checkpoints")):
        accelerator.load_state()
        step_seconds = 0.0
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    hangs_now = attempt == "0"
    crashes_now = attempt == ("1" if args.hang_after >= 0 else "0")
    rank, world = accelerator.process_index, accelerator.num_processes
    if args.preempt:
        sys.stdout.write(f"worker {rank} {os.getpid()}\n")  # one write: both ranks share the launcher's stdout
        sys.stdout.flush()
    seen: list[list[int]] = []

    def write_seen() -> None:
        with open(os.path.join(args.out, f"seen-{world}-{rank}-{attempt}.json"), "w") as handle:
            json.dump({"start": progress.step, "epochs": seen}, handle)

    for epoch in range(progress.epoch, EPOCHS):
        progress.epoch = epoch
        seen.append([])
        for ids, x, y in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            seen[-1].extend(ids.tolist())
            time.sleep(step_seconds)
            progress.step += 1
            if args.preempt and accelerator.is_main_process:
                print(f"trained step {progress.step}", flush=True)
            if progress.step % EVERY == 0:
                accelerator.save_state()
            if progress.step == args.crash_after and rank == 1 and crashes_now:
                write_seen()
                os._exit(17)
            if progress.step == args.hang_after and rank == 1 and hangs_now:
                os.kill(os.getpid(), signal.SIGSTOP)
            if progress.step == args.stop_after:
                write_seen()
                return
        progress.epoch = epoch + 1
    write_seen()
    state = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        torch.save({key: value.detach().clone() for key, value in state.items()}, os.path.join(args.out, "final.pt"))
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
