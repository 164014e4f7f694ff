"""The same seeded training under Accelerate and under drivetrain, side by side.

    python benchmarks/accelerate_parity.py --accelerate-python VENV/bin/python [--processes 1 2]

A small MLP with dropout is trained for three epochs on a shuffled loader after
``set_seed(42)``, once with the real Accelerate (run by ``--accelerate-python``, a virtualenv
that has it) and once with drivetrain (run by this interpreter), on 1 and on 2 CPU processes
(gloo), for each loader variant: shuffling on and off, ``drop_last``, ``use_seedable_sampler``.
It prints each step's loss side by side and, per variant, the largest difference of the losses,
of the final weights and whether the global torch generator ends in the same state. The goal
is 0.0 everywhere on CPU.

Then the checkpoints cross over: drivetrain's ``load_state`` resumes the directory Accelerate's
``save_state`` wrote (weights, optimizer, scheduler, random states, a registered object), and
Accelerate's ``load_state`` resumes a drivetrain checkpoint exported with ``drivetrain
checkpoint export --format accelerate``; both continue for one epoch and must match, step for
step, Accelerate resuming its own checkpoint.

The Accelerate side needs its own virtualenv, kept apart from drivetrain's::

    python3.11 -m venv accel-venv
    accel-venv/bin/pip install torch==2.13.0 accelerate==1.15.0 numpy

Each worker is started as its own process with the usual ``RANK`` / ``WORLD_SIZE`` /
``MASTER_ADDR`` / ``MASTER_PORT`` variables, so neither side's launcher is involved.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

VARIANTS = {
    "shuffle": dict(shuffle=True, drop_last=False, seedable=False),
    "shuffle+drop_last": dict(shuffle=True, drop_last=True, seedable=False),
    "shuffle+seedable": dict(shuffle=True, drop_last=False, seedable=True),
    "no-shuffle": dict(shuffle=False, drop_last=False, seedable=False),
}
EPOCHS = 3


# ------------------------------------------------------------------------ worker


def _framework(name: str):
    if name == "accelerate":
        import accelerate as lib
        from accelerate.utils import DataLoaderConfiguration, set_seed
    else:
        import drivetrain as lib
        from drivetrain.utils import DataLoaderConfiguration, set_seed
    return lib.Accelerator, DataLoaderConfiguration, set_seed


def _setup(name: str, variant: dict):
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    Accelerator, DataLoaderConfiguration, set_seed = _framework(name)
    set_seed(42)
    inputs = torch.randn(37, 6)
    targets = inputs.sum(dim=1, keepdim=True) + 0.1 * torch.randn(37, 1)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.9)
    loader = DataLoader(TensorDataset(inputs, targets), batch_size=4, shuffle=variant["shuffle"],
                        drop_last=variant["drop_last"])
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_seedable_sampler=variant["seedable"]))
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    return accelerator, model, optimizer, loader, scheduler


def _epoch(accelerator, model, optimizer, loader, scheduler, losses: list[float]) -> None:
    import torch

    model.train()
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.item())


def _weights(accelerator, model) -> dict[str, list]:
    return {k: v.detach().cpu().flatten().tolist() for k, v in accelerator.unwrap_model(model).state_dict().items()}


class Counter:
    """A custom object checkpointed with ``register_for_checkpointing``: the epochs run."""

    def __init__(self) -> None:
        self.count = 0

    def state_dict(self) -> dict:
        return {"count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.count = state["count"]


def worker(name: str, variant: dict, out: Path, save: Path | None, load: Path | None) -> None:
    import torch

    accelerator, model, optimizer, loader, scheduler = _setup(name, variant)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    losses: list[float] = []
    result: dict = {}
    if load is not None:
        accelerator.load_state(str(load))
        _epoch(accelerator, model, optimizer, loader, scheduler, losses)
        counter.count += 1
    else:
        for epoch in range(EPOCHS):
            _epoch(accelerator, model, optimizer, loader, scheduler, losses)
            counter.count += 1
            if save is not None and epoch == EPOCHS - 2:
                accelerator.save_state(str(save))
    result["losses"] = losses
    result["epochs"] = counter.count
    result["weights"] = _weights(accelerator, model)
    result["rng"] = torch.get_rng_state().tolist()
    accelerator.wait_for_everyone()
    (out / f"rank{accelerator.process_index}.json").write_text(json.dumps(result))
    accelerator.end_training() if hasattr(accelerator, "end_training") else None


# ------------------------------------------------------------------- orchestrator


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(python: str, name: str, variant: str, processes: int, out: Path, *extra: str) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    port = str(_free_port())
    children = []
    for rank in range(processes):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(processes),
                   LOCAL_WORLD_SIZE=str(processes), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1", ACCELERATE_USE_CPU="true")
        if processes == 1:
            for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
                env.pop(key)
        command = [python, __file__, "--worker", name, "--variant", variant, "--out", str(out), *extra]
        children.append(subprocess.Popen(command, env=env))
    codes = [child.wait() for child in children]
    if any(codes):
        raise SystemExit(f"{name} {variant} on {processes} process(es) failed: exit codes {codes}")
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(processes)]


def _largest(a: dict, b: dict) -> float:
    return max(abs(x - y) for key in a for x, y in zip(a[key], b[key]))


def _compare(label: str, accel: list[dict], drive: list[dict], show_steps: bool) -> bool:
    same = True
    for rank, (a, d) in enumerate(zip(accel, drive)):
        if show_steps:
            print(f"  rank {rank}: step  accelerate            drivetrain")
            for step, (x, y) in enumerate(itertools.zip_longest(a["losses"], d["losses"])):
                print(f"           {step:4d}  {x!s:20.20}  {y!s:20.20}")
        steps = len(a["losses"]) == len(d["losses"])
        loss_diff = max((abs(x - y) for x, y in zip(a["losses"], d["losses"])), default=0.0) if steps else float("inf")
        weight_diff = _largest(a["weights"], d["weights"])
        rng = a["rng"] == d["rng"]
        same &= steps and loss_diff == 0.0 and weight_diff == 0.0 and rng
        print(f"{label} rank {rank}: {len(a['losses'])} steps, largest loss difference {loss_diff}, "
              f"largest weight difference {weight_diff}, global generator state equal: {rng}")
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accelerate-python", help="a python that has accelerate 1.15.0 (see above)")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--steps", action="store_true", help="print every step's losses side by side")
    parser.add_argument("--no-crossover", action="store_true", help="skip the checkpoint cross-over")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--save", help=argparse.SUPPRESS)
    parser.add_argument("--load", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, VARIANTS[args.variant], Path(args.out), args.save and Path(args.save),
               args.load and Path(args.load))
        return
    if not args.accelerate_python:
        parser.error("--accelerate-python is required (a virtualenv with accelerate 1.15.0, see above)")
    all_same = True
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for processes, variant in itertools.product(args.processes, args.variants):
            label = f"{variant:18} x{processes}"
            accel = _run(args.accelerate_python, "accelerate", variant, processes, root / f"a-{variant}-{processes}")
            drive = _run(sys.executable, "drivetrain", variant, processes, root / f"d-{variant}-{processes}")
            all_same &= _compare(label, accel, drive, args.steps)
        if not args.no_crossover:
            all_same &= _crossover(args.accelerate_python, args.processes, root)
    print("bit-identical" if all_same else "DIFFERENT")
    sys.exit(0 if all_same else 1)


def _crossover(accelerate_python: str, processes_list: list[int], root: Path) -> bool:
    """Resume each side's checkpoint on the other side: both must continue exactly as Accelerate
    continues from its own checkpoint (on one process, that is the uninterrupted run; on several,
    Accelerate's checkpoint has no place for the shared sampler generator, so its own resume
    shuffles the next epoch from that generator's first state, and so does drivetrain's)."""
    same = True
    for processes in processes_list:
        variant = "shuffle"
        a_ckpt, d_ckpt, d_export = root / f"a-ckpt-{processes}", root / f"d-ckpt-{processes}", root / f"d-exp-{processes}"
        _run(accelerate_python, "accelerate", variant, processes, root / f"ca-{processes}", "--save", str(a_ckpt))
        _run(sys.executable, "drivetrain", variant, processes, root / f"cd-{processes}", "--save", str(d_ckpt))
        subprocess.run([sys.executable, "-m", "drivetrain.cli.main", "checkpoint", "export", "--format", "accelerate",
                        str(d_ckpt), str(d_export)], check=True)
        reference = _run(accelerate_python, "accelerate", variant, processes, root / f"aa-{processes}",
                         "--load", str(a_ckpt))
        d_from_a = _run(sys.executable, "drivetrain", variant, processes, root / f"da-{processes}", "--load", str(a_ckpt))
        a_from_d = _run(accelerate_python, "accelerate", variant, processes, root / f"ad-{processes}",
                        "--load", str(d_export))
        for label, resumed in (("drivetrain resumes Accelerate's checkpoint", d_from_a),
                               ("Accelerate resumes drivetrain's export    ", a_from_d)):
            for rank, (r, ref) in enumerate(zip(resumed, reference)):
                loss_diff = max(abs(x - y) for x, y in zip(r["losses"], ref["losses"]))
                weight_diff = _largest(r["weights"], ref["weights"])
                equal = loss_diff == 0.0 and weight_diff == 0.0 and r["rng"] == ref["rng"] and r["epochs"] == ref["epochs"]
                same &= equal
                print(f"{label} x{processes} rank {rank}, against Accelerate resuming its own: largest loss difference "
                      f"{loss_diff}, largest weight difference {weight_diff}, generator state and custom object "
                      f"equal: {r['rng'] == ref['rng'] and r['epochs'] == ref['epochs']}")
    return same


if __name__ == "__main__":
    main()
