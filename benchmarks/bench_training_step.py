"""Step time and peak memory of a drivetrain training loop against plain PyTorch DDP.

Both loops run in the same processes, on the same process group, with the same model,
data and optimizer, interleaved (A B B A ...) so that warm-up and machine noise hit both
alike. Launch it the way the library is used:

    drivetrain launch --cpu --num-processes 2 benchmarks/bench_training_step.py

Prints, for a small and a medium model, the median step time of each and the ratio
(target: drivetrain <= 1.02x plain on the small model), and the peak growth of heap memory
in use during each loop (target: no more than 2% above plain).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from drivetrain import Accelerator
from common import PeakHeap, timed_drivetrain_steps

MODELS = {"small": (64, 256, 3), "medium": (512, 2048, 4)}  # (in/out features, hidden, layers)


def build(size: str, seed: int = 0) -> torch.nn.Module:
    features, hidden, layers = MODELS[size]
    torch.manual_seed(seed)
    blocks: list[torch.nn.Module] = [torch.nn.Linear(features, hidden), torch.nn.GELU()]
    for _ in range(layers - 2):
        blocks += [torch.nn.Linear(hidden, hidden), torch.nn.GELU()]
    blocks.append(torch.nn.Linear(hidden, features))
    return torch.nn.Sequential(*blocks)


def batches(size: str, steps: int, batch: int, rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    features = MODELS[size][0]
    generator = torch.Generator().manual_seed(rank)
    return [(torch.randn(batch, features, generator=generator), torch.randn(batch, features, generator=generator))
            for _ in range(steps)]


def plain_loop(size: str, data, rank: int) -> list[float]:
    model = DistributedDataParallel(build(size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for x, y in data:
        start = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return times


def drivetrain_loop(size: str, data, accelerator: Accelerator) -> list[float]:
    model = build(size)
    return timed_drivetrain_steps(accelerator, model, torch.optim.AdamW(model.parameters(), lr=1e-3), data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # plain PyTorch's own set-up; drivetrain joins this group
    accelerator = Accelerator()
    rank = accelerator.process_index
    report = []
    for size in MODELS:
        steps = args.steps if size == "small" else max(args.steps // 8, 10)
        data = batches(size, steps, args.batch, rank)
        results: dict[str, list[float]] = {"plain": [], "drivetrain": []}
        memory: dict[str, list[int]] = {"plain": [], "drivetrain": []}
        for trial in range(-1, args.trials):  # trial -1 warms both up and is not counted
            order = ("plain", "drivetrain") if trial % 2 == 0 else ("drivetrain", "plain")
            for name in order:
                accelerator.wait_for_everyone()
                with PeakHeap() as peak:
                    times = plain_loop(size, data, rank) if name == "plain" else drivetrain_loop(size, data, accelerator)
                if trial >= 0:
                    results[name].extend(times[5:])  # drop each loop's first steps
                    memory[name].append(peak.growth)
        plain, ours = statistics.median(results["plain"]), statistics.median(results["drivetrain"])
        mem_plain, mem_ours = statistics.median(memory["plain"]), statistics.median(memory["drivetrain"])
        params = sum(p.numel() for p in build(size).parameters())
        report.append((size, params, plain, ours, mem_plain, mem_ours))
    if accelerator.is_main_process:
        print(f"{'model':8} {'params':>10} {'plain ms':>9} {'drivetrain ms':>14} {'ratio':>6} "
              f"{'plain MB':>9} {'drivetrain MB':>14} {'ratio':>6}")
        for size, params, plain, ours, mem_plain, mem_ours in report:
            mem_ratio = mem_ours / mem_plain if mem_plain > 0 else float("nan")
            print(f"{size:8} {params:>10,} {plain * 1e3:>9.3f} {ours * 1e3:>14.3f} {ours / plain:>6.3f} "
                  f"{mem_plain / 2**20:>9.1f} {mem_ours / 2**20:>14.1f} {mem_ratio:>6.3f}")
        print(f"processes: {accelerator.num_processes}, backend: {accelerator.state.backend}, "
              f"steps per trial: {args.steps} (small), trials: {args.trials}")
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
