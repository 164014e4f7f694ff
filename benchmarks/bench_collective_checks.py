"""What it costs to check, before a collective, that every process passes the same shapes and dtypes.

A collective whose processes pass different layouts either aborts the backend (gloo kills the
receiving process) or returns garbage, so a check has to run before the data moves. This
measures, on the same process group and the same tensors, interleaved like
``bench_collectives.py``:

- ``raw``: the plain torch.distributed call;
- ``+tensor check``: the call preceded by an all_gather of a fixed-size int64 tensor holding
  a digest of the layout (the cheapest exchange that lets every process see every layout);
- ``+object check``: the call preceded by ``all_gather_object`` of the layout's description
  (what debug mode does: it can say which rank passed what).

    drivetrain launch --cpu --num-processes 2 benchmarks/bench_collective_checks.py

Prints the median time per call of each and the ratios to ``raw`` for 1 KB and 1 MB payloads.
"""

from __future__ import annotations

import argparse
from typing import Callable

import torch
import torch.distributed as dist

from bench_collectives import compare, raw_broadcast, raw_gather, raw_reduce
from drivetrain.state import PartialState

SIZES = {"1 KB": 1 << 10, "1 MB": 1 << 20}


def tensor_check(tensor: torch.Tensor) -> None:
    digest = torch.tensor([hash((tuple(tensor.shape), tensor.dtype)), tensor.numel()], dtype=torch.int64)
    out = torch.empty(dist.get_world_size() * 2, dtype=torch.int64)
    raw_gather_into = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    raw_gather_into(out, digest)


def object_check(tensor: torch.Tensor) -> None:
    out: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(out, f"{list(tensor.shape)} {tensor.dtype}")


def checked(check: Callable[[torch.Tensor], None], raw: Callable[[torch.Tensor], object],
            tensor: torch.Tensor) -> Callable[[], object]:
    def call() -> object:
        check(tensor)
        return raw(tensor)

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    arguments = parser.parse_args()
    state = PartialState()
    torch.set_num_threads(1)
    rows = []
    for label, size in SIZES.items():
        tensor = torch.randn(size // 4 // 16, 16)
        calls = 200 if size < (1 << 20) else 20
        for name, raw in (("gather", raw_gather), ("reduce(sum)", raw_reduce), ("broadcast", raw_broadcast)):
            plain = lambda raw=raw: raw(tensor)  # noqa: E731
            row, raw_times = [name, label], []
            for check in (tensor_check, object_check):
                ours_time, raw_time, ratio = compare(checked(check, raw, tensor), plain, calls, arguments.rounds)
                row += [ours_time, ratio]
                raw_times.append(raw_time)
            rows.append(row[:2] + [min(raw_times)] + row[2:])
    state.wait_for_everyone()
    if state.is_main_process:
        print(f"a layout check before each collective, {state.num_processes} processes ({state.backend}); "
              f"median time per call and median of the per-round ratios to the raw call")
        print(f"{'operation':<13}{'payload':>8}{'raw':>11}{'+tensor check':>15}{'ratio':>8}{'+object check':>15}"
              f"{'ratio':>8}")
        for name, label, raw_time, tensor_time, tensor_ratio, object_time, object_ratio in rows:
            print(f"{name:<13}{label:>8}{raw_time * 1e6:>9.1f}us{tensor_time * 1e6:>13.1f}us{tensor_ratio:>7.2f}x"
                  f"{object_time * 1e6:>13.1f}us{object_ratio:>7.2f}x")
    state.destroy_process_group()


if __name__ == "__main__":
    main()
