"""drivetrain's collectives against the raw torch.distributed calls they stand for.

Both run in the same processes, on the same process group, with the same tensors,
interleaved (A B B A ...) so warm-up and machine noise hit both alike. Launch it the way the
library is used:

    drivetrain launch --cpu --num-processes 2 benchmarks/bench_collectives.py

For payloads of 1 KB, 1 MB and 64 MB (float32) it prints the median time per call of each
and the ratio drivetrain / raw (target: <= 1.05x). The "checked" rows time gather and reduce
of the payloads whose layouts are compared by default (16 MB and 64 MB) against the same calls
without the comparison (target: <= 1.01x, or the check belongs under --debug). The raw counterpart is what a user would
write to get the same result:

- ``gather(t)``: allocate the output, ``all_gather_into_tensor`` (``all_gather_single``);
- ``broadcast(t)``: ``dist.broadcast(t)`` (both in place);
- ``reduce(t, "sum")``: leaves its input untouched, so ``t.clone()`` then ``all_reduce``;
- ``gather`` of a dict of 8 tensors: 8 raw gathers.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from typing import Callable, Iterator

import torch
import torch.distributed as dist

from drivetrain.state import PartialState
from drivetrain.utils import broadcast, gather, reduce

SIZES = {"1 KB": 1 << 10, "1 MB": 1 << 20, "64 MB": 64 << 20}


def unwatched(function: Callable) -> Callable:
    """torch's own function: once the process group exists, torch.distributed's collectives
    note themselves for hang reports (docs/monitoring.md, "Reading a hang report"), a cost drivetrain's side must
    show and the raw side must not (this module may be imported after the group is made)."""
    return function.__wrapped__ if getattr(function, "__drivetrain_watched__", False) else function


_gather_single = unwatched(getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)
RAW = {"broadcast": unwatched(dist.broadcast), "all_reduce": unwatched(dist.all_reduce)}


def raw_gather(tensor: torch.Tensor) -> torch.Tensor:
    out = torch.empty((dist.get_world_size() * tensor.shape[0], *tensor.shape[1:]), dtype=tensor.dtype)
    _gather_single(out, tensor)
    return out


def raw_reduce(tensor: torch.Tensor) -> torch.Tensor:
    out = tensor.clone()
    RAW["all_reduce"](out)
    return out


def raw_broadcast(tensor: torch.Tensor) -> torch.Tensor:
    RAW["broadcast"](tensor, src=0)
    return tensor


def raw_gather_dict(data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: raw_gather(value) for key, value in data.items()}


def timed_block(function: Callable[[], object], calls: int) -> float:
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls


def compare(ours: Callable[[], object], raw: Callable[[], object], calls: int,
            rounds: int) -> tuple[float, float, float]:
    """(median time of ours, median time of raw, median of the per-round ratios ours / raw).

    The two blocks of a round run back to back, so the per-round ratio cancels the slow
    drifts of a shared machine; its median is the figure to read.
    """
    for _ in range(2):  # warm-up
        ours()
        raw()
    ours_times, raw_times = [], []
    for round_index in range(rounds):
        pair = [(ours, ours_times), (raw, raw_times)]
        for function, times in (pair if round_index % 2 == 0 else pair[::-1]):
            times.append(timed_block(function, calls))
    ratios = [a / b for a, b in zip(ours_times, raw_times)]
    return statistics.median(ours_times), statistics.median(raw_times), statistics.median(ratios)


@contextlib.contextmanager
def communication_removed() -> Iterator[None]:
    """Both sides do everything but talk: what is left is each side's own cost per call,
    which a shared machine's noise does not drown."""
    from drivetrain_torch_distributed import process_group

    def nothing(*args: object, **kwargs: object) -> None:
        return None

    from drivetrain.runtime.collective_watch import watched

    # drivetrain's side keeps the record each collective makes (a watched call of nothing)
    saved = dist.broadcast, dist.all_reduce, process_group._all_gather_single, globals()["_gather_single"], dict(RAW)
    dist.broadcast = watched("broadcast", nothing, 2)
    dist.all_reduce = watched("all_reduce", nothing, 2)
    process_group._all_gather_single = watched("all_gather_into_tensor", nothing, 2)
    globals()["_gather_single"] = RAW["broadcast"] = RAW["all_reduce"] = nothing
    try:
        yield
    finally:
        (dist.broadcast, dist.all_reduce, process_group._all_gather_single, globals()["_gather_single"],
         saved_raw) = saved
        RAW.update(saved_raw)


def own_cost(function: Callable[[], object], calls: int = 20_000, rounds: int = 7) -> float:
    """Best time per call over ``rounds`` blocks, in seconds (no barrier: nothing is shared)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def layout_check_rows(rounds: int) -> list[tuple]:
    """gather and reduce of the smallest payload whose layouts are compared by default (and of 4x
    it), against the same call with the comparison switched off: what the check itself costs."""
    from drivetrain.services import cross_process

    threshold = cross_process.LAYOUT_CHECK_BYTES
    rows = []
    for size in (threshold, 4 * threshold):
        tensor = torch.randn(size // 4 // 16, 16)

        def unchecked(call: Callable[[], object]) -> Callable[[], object]:
            def run() -> object:
                cross_process.LAYOUT_CHECK_BYTES = float("inf")
                try:
                    return call()
                finally:
                    cross_process.LAYOUT_CHECK_BYTES = threshold
            return run

        label = f"{size >> 20} MB"
        for name, call in (("gather", lambda: gather(tensor)), ("reduce(sum)", lambda: reduce(tensor, "sum"))):
            rows.append((f"{name} checked", label, *compare(call, unchecked(call), 2, max(5, rounds // 3))))
    # the check alone (one all-gather of a digest), against the smallest gather that makes it:
    # the machine's noise between two gathers of 16 MB is larger than the check
    collectives = PartialState().run.collectives
    check = statistics.median(timed_block(
        lambda: cross_process._compare_layout_digests("gather", tensor, tensor, collectives), 50) for _ in range(rounds))
    smallest = torch.randn(threshold // 4 // 16, 16)
    gathered = statistics.median(timed_block(lambda: gather(smallest), 2) for _ in range(max(5, rounds // 3)))
    rows.append(("the check alone", f"{threshold >> 20} MB", check, gathered, 1 + check / gathered))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--layout-check-only", action="store_true", help="only the rows of the layout check")
    arguments = parser.parse_args()
    state = PartialState()
    torch.set_num_threads(1)
    rows = []
    for label, size in ({} if arguments.layout_check_only else SIZES).items():
        elements = size // 4
        tensor = torch.randn(elements // 16, 16) if elements >= 16 else torch.randn(elements)
        calls = max(2, min(400, (8 << 20) // size * 4))
        rounds = arguments.rounds if size < (64 << 20) else max(5, arguments.rounds // 3)
        for name, ours, raw in (
            ("gather", lambda: gather(tensor), lambda: raw_gather(tensor)),
            ("broadcast", lambda: broadcast(tensor), lambda: raw_broadcast(tensor)),
            ("reduce(sum)", lambda: reduce(tensor, "sum"), lambda: raw_reduce(tensor)),
        ):
            rows.append((name, label, *compare(ours, raw, calls, rounds)))
    rows.extend(layout_check_rows(arguments.rounds))
    if arguments.layout_check_only:
        if state.is_main_process:
            for name, label, ours_time, raw_time, ratio in rows:
                print(f"{name:<20}{label:>7}{ours_time * 1e6:>14.1f}us{raw_time * 1e6:>14.1f}us{ratio:>8.3f}x")
        state.destroy_process_group()
        return
    parts = {f"t{i}": torch.randn(16, 16) for i in range(8)}
    rows.append(("gather dict x8", "8 KB", *compare(lambda: gather(parts), lambda: raw_gather_dict(parts), 200,
                                                     arguments.rounds)))
    small = torch.randn(16, 16)
    small_parts = {f"t{i}": torch.randn(4, 16) for i in range(8)}
    with communication_removed():
        costs = [(name, own_cost(ours), own_cost(raw)) for name, ours, raw in (
            ("gather", lambda: gather(small), lambda: raw_gather(small)),
            ("broadcast", lambda: broadcast(small), lambda: raw_broadcast(small)),
            ("reduce(sum)", lambda: reduce(small, "sum"), lambda: raw_reduce(small)),
            ("gather dict x8", lambda: gather(small_parts), lambda: raw_gather_dict(small_parts)),
            ("record (hangs)", lambda: dist.all_reduce(small), lambda: RAW["all_reduce"](small)),
        )]
    state.wait_for_everyone()
    if state.is_main_process:
        print(f"collectives on {state.num_processes} processes ({state.backend}): median time per call over "
              f"{arguments.rounds} interleaved rounds, and median of the per-round ratios")
        print(f"{'operation':<16}{'payload':>9}{'drivetrain':>14}{'raw':>14}{'ratio':>9}")
        for name, label, ours_time, raw_time, ratio in rows:
            print(f"{name:<16}{label:>9}{ours_time * 1e6:>12.1f}us{raw_time * 1e6:>12.1f}us{ratio:>8.3f}x")
        print(f"worst ratio {max(row[4] for row in rows if 'check' not in row[0]):.3f}x (target <= 1.05x); "
              f"layout check {max(row[4] for row in rows if 'checked' in row[0]):.3f}x, alone "
              f"{next(r[4] for r in rows if r[0] == 'the check alone'):.4f}x the "
              "smallest gather it is made for (target <= 1.01x)")
        print("\nown cost per call with the communication taken out (1 KB; best of 7 blocks)")
        print(f"{'operation':<16}{'drivetrain':>14}{'raw':>14}{'added':>12}")
        for name, ours_cost, raw_cost in costs:
            print(f"{name:<16}{ours_cost * 1e6:>12.2f}us{raw_cost * 1e6:>12.2f}us{(ours_cost - raw_cost) * 1e6:>10.2f}us")
    state.destroy_process_group()


if __name__ == "__main__":
    main()
