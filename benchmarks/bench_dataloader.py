"""Throughput of a prepared data loader against DataLoader + DistributedSampler.

Both read the same map-style dataset in the same processes, shuffled, with the same batch
size, one epoch each, interleaved (A B B A ...) so warm-up and machine noise hit both
alike. Launch it the way the library is used:

    drivetrain launch --cpu --num-processes 2 benchmarks/bench_dataloader.py

Prints samples per second per process for each and the ratio prepared / plain (target:
>= 0.97x), by the wall clock and by CPU time (steadier on a shared machine), for a dataset
of ready tensors (the loader's own cost shows most) and one whose samples take some work to
produce. For information it also times the dispatching loader
(the main process reads, every process receives its slice).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset

from drivetrain.data_loader import prepare_data_loader
from drivetrain.state import PartialState


class Computed(Dataset):
    """Samples that cost some work each, like decoding or augmenting."""

    def __init__(self, length: int, features: int) -> None:
        self.length, self.features = length, features

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        generator = torch.Generator().manual_seed(index)
        x = torch.randn(self.features, generator=generator)
        return (x - x.mean()) / (x.std() + 1e-6), index % 10


def epoch_rate(loader, epoch: int) -> tuple[float, float]:
    """Samples per second of one epoch: by the wall clock, and by this process's CPU time
    (which other programs on a shared machine do not inflate)."""
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)
    wall, cpu = time.perf_counter(), time.process_time()
    samples = 0
    for x, _y in loader:
        samples += x.shape[0]
    return samples / (time.perf_counter() - wall), samples / (time.process_time() - cpu)


def compare(dataset: Dataset, batch_size: int, epochs: int, state: PartialState, dispatch: bool = False):
    plain = DataLoader(dataset, batch_size=batch_size,
                       sampler=DistributedSampler(dataset, num_replicas=state.num_processes, rank=state.process_index,
                                                  shuffle=True, seed=0))
    prepared = prepare_data_loader(DataLoader(dataset, batch_size=batch_size, shuffle=True), device=state.device,
                                   put_on_device=True, dispatch_batches=dispatch)
    plain_rates, prepared_rates = [], []
    epoch_rate(plain, 0)  # warm-up
    epoch_rate(prepared, 0)
    for epoch in range(epochs):
        pair = [(plain, plain_rates), (prepared, prepared_rates)]
        for loader, rates in (pair if epoch % 2 == 0 else pair[::-1]):
            state.wait_for_everyone()
            rates.append(epoch_rate(loader, epoch))
    # epochs of a pair run back to back: their ratio cancels the slow drifts of the machine
    wall_ratio = statistics.median(ours[0] / plain[0] for ours, plain in zip(prepared_rates, plain_rates))
    cpu_ratio = statistics.median(ours[1] / plain[1] for ours, plain in zip(prepared_rates, plain_rates))
    return (statistics.median(rate[0] for rate in prepared_rates), statistics.median(rate[0] for rate in plain_rates),
            wall_ratio, cpu_ratio)


def own_cost_per_batch(state: PartialState, batch_size: int = 8, epochs: int = 15) -> tuple[float, float]:
    """Each loader's own cost per batch, in seconds: the samples are list items and every
    batch is the same prepared pair of tensors, so almost nothing but the loader's work is
    left (the prepared one also places the batch). Best epoch by CPU time."""
    items = list(range(40_000))
    prebuilt = [torch.randn(batch_size, 32), torch.randint(0, 10, (batch_size,))]

    def collate(_samples):
        return prebuilt

    plain = DataLoader(items, batch_size=batch_size, collate_fn=collate,
                       sampler=DistributedSampler(items, num_replicas=state.num_processes, rank=state.process_index,
                                                  shuffle=True, seed=0))
    prepared = prepare_data_loader(DataLoader(items, batch_size=batch_size, shuffle=True, collate_fn=collate),
                                   device=state.device, put_on_device=True)
    best = {id(plain): float("inf"), id(prepared): float("inf")}
    for epoch in range(epochs):
        for loader in (plain, prepared) if epoch % 2 == 0 else (prepared, plain):
            if hasattr(loader.sampler, "set_epoch"):
                loader.sampler.set_epoch(epoch)
            start, batches = time.process_time(), 0
            for _batch in loader:
                batches += 1
            best[id(loader)] = min(best[id(loader)], (time.process_time() - start) / batches)
    return best[id(prepared)], best[id(plain)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=21)
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    state = PartialState()
    torch.manual_seed(0)
    ready = TensorDataset(torch.randn(40_000, 32), torch.randint(0, 10, (40_000,)))
    computed = Computed(8_000, 256)
    rows = [
        ("ready tensors, batch 64", *compare(ready, 64, arguments.epochs, state)),
        ("ready tensors, batch 8", *compare(ready, 8, arguments.epochs, state)),
        ("computed samples, batch 32", *compare(computed, 32, arguments.epochs, state)),
        ("dispatched, ready, batch 64", *compare(ready, 64, max(3, arguments.epochs // 3), state, dispatch=True)),
    ]
    ours_cost, plain_cost = own_cost_per_batch(state)
    if state.is_main_process:
        print(f"data loading on {state.num_processes} processes: median samples/s per process over "
              f"{arguments.epochs} interleaved epochs each; ratios are medians of the per-epoch ratios, by the "
              f"wall clock and by CPU time")
        print(f"{'dataset':<30}{'prepared':>12}{'plain':>12}{'wall ratio':>12}{'cpu ratio':>11}")
        for name, ours, plain, wall_ratio, cpu_ratio in rows:
            print(f"{name:<30}{ours:>12.0f}{plain:>12.0f}{wall_ratio:>11.3f}x{cpu_ratio:>10.3f}x")
        sharded = [row for row in rows if not row[0].startswith("dispatched")]
        print(f"worst sharded ratio: wall {min(row[3] for row in sharded):.3f}x, cpu {min(row[4] for row in sharded):.3f}x "
              f"(target >= 0.97x); the dispatched row is for information (its CPU time excludes waiting)")
        print(f"\nown cost per batch (batches of 8, no sample loading or collation): prepared "
              f"{ours_cost * 1e6:.2f}us, plain {plain_cost * 1e6:.2f}us, added {(ours_cost - plain_cost) * 1e6:.2f}us")
    state.destroy_process_group()


if __name__ == "__main__":
    main()
