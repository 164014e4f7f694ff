"""FSDP FULL_SHARD against DDP (memory per process) and against a plain-PyTorch FSDP loop
(step time), on the same transformer-like model, in the same processes.

    drivetrain launch --cpu --num-processes 2 benchmarks/bench_fsdp.py [--fsdp-version 2]

Memory: for each of DDP and FSDP FULL_SHARD (both through drivetrain), the bytes this
process holds in parameters, gradients and optimizer state after a few AdamW steps
(counted from the tensors themselves), and the peak of the C heap in use from building the
model to the last step, above what was in use before (sampled in a thread; glibc's
``mallinfo2``). Sharding over N processes should divide the first three by about N.

Step time: drivetrain's FSDP loop (``accelerator.prepare``, ``accelerator.backward``, the
wrapped optimizer) against the same loop written with torch's ``fully_shard`` (or
``FullyShardedDataParallel``) by hand: same model, units, data and process group,
interleaved (A B B A ...) so that warm-up and machine noise hit both alike. Target: the
median drivetrain step at most 1.03x the plain one.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from drivetrain import Accelerator, FullyShardedDataParallelPlugin
from drivetrain.state import AcceleratorState, GradientState
from common import PeakHeap, timed_drivetrain_steps

SIZES = {"memory": (512, 8, 64), "timing": (256, 4, 32)}  # width, blocks, sequence length


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.norm2 = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, length, 3, 4, width // 4).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Model(torch.nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self, width: int, blocks: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(blocks))
        self.head = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def build(size: str) -> Model:
    width, blocks, _length = SIZES[size]
    torch.manual_seed(0)
    return Model(width, blocks)


def data(size: str, steps: int, batch: int, rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    width, _blocks, length = SIZES[size]
    generator = torch.Generator().manual_seed(rank)
    return [(torch.randn(batch, length, width, generator=generator), torch.randn(batch, length, width, generator=generator))
            for _ in range(steps)]


# ------------------------------------------------------------------------- memory


def _local_bytes(tensor: torch.Tensor | None) -> int:
    if tensor is None:
        return 0
    if hasattr(tensor, "to_local"):
        tensor = tensor.to_local()
    return tensor.numel() * tensor.element_size()


def held_bytes(model: torch.nn.Module, optimizer) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state this process holds."""
    inner = getattr(optimizer, "optimizer", optimizer)
    params = list(model.parameters())
    state = sum(_local_bytes(value) for entry in inner.state.values() for value in entry.values()
                if isinstance(value, torch.Tensor))
    return {"parameters": sum(_local_bytes(p) for p in params), "gradients": sum(_local_bytes(p.grad) for p in params),
            "optimizer state": state}


def fresh(**kwargs) -> Accelerator:
    AcceleratorState._reset_state()
    GradientState._reset_state()
    return Accelerator(**kwargs)


def memory_run(accelerator: Accelerator, steps: int, batch: int) -> tuple[dict[str, int], int]:
    rank = accelerator.process_index
    inputs = data("memory", steps, batch, rank)
    accelerator.wait_for_everyone()
    with PeakHeap() as peak:
        model = build("memory")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model, optimizer = accelerator.prepare(model, optimizer)
        for x, y in inputs:
            accelerator.backward(F.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)  # keep gradients allocated: count them
        held = held_bytes(model, optimizer)
    accelerator.wait_for_everyone()
    accelerator.free_memory()
    del model, optimizer
    gc.collect()
    return held, peak.growth


# ------------------------------------------------------------------------- step time


def plain_loop(version: int, inputs, mesh) -> list[float]:
    model = build("timing")
    if version == 2:
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        model = FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=torch.device("cpu"),
                                         use_orig_params=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for x, y in inputs:
        start = time.perf_counter()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return times


def drivetrain_loop(accelerator: Accelerator, inputs) -> list[float]:
    model = build("timing")
    return timed_drivetrain_steps(accelerator, model, torch.optim.AdamW(model.parameters(), lr=1e-4), inputs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fsdp-version", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--memory-steps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    version = args.fsdp_version

    ddp = Accelerator()  # the launch chose DDP for its 2 processes
    world, rank = ddp.num_processes, ddp.process_index
    assert ddp.distributed_type == "MULTI_CPU", ddp.distributed_type
    ddp_held, ddp_peak = memory_run(ddp, args.memory_steps, args.batch)

    def fsdp() -> Accelerator:
        return fresh(fsdp_plugin=FullyShardedDataParallelPlugin(
            fsdp_version=version, sharding_strategy="FULL_SHARD", auto_wrap_policy="TRANSFORMER_BASED_WRAP"))

    fsdp_held, fsdp_peak = memory_run(fsdp(), args.memory_steps, args.batch)

    accelerator = fsdp()
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    inputs = data("timing", args.steps, args.batch, rank)
    results: dict[str, list[float]] = {"plain": [], "drivetrain": []}
    for trial in range(-1, args.trials):  # trial -1 warms both up and is not counted
        order = ("plain", "drivetrain") if trial % 2 == 0 else ("drivetrain", "plain")
        for name in order:
            accelerator.wait_for_everyone()
            times = plain_loop(version, inputs, mesh) if name == "plain" else drivetrain_loop(accelerator, inputs)
            if trial >= 0:
                results[name].extend(times[3:])  # drop each loop's first steps
    # every process reports; the main process prints
    mine = {"ddp_held": ddp_held, "ddp_peak": ddp_peak, "fsdp_held": fsdp_held, "fsdp_peak": fsdp_peak,
            "plain": statistics.median(results["plain"]), "drivetrain": statistics.median(results["drivetrain"])}
    everyone: list = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        params = sum(p.numel() for p in build("memory").parameters())
        print(f"FSDP{version} FULL_SHARD vs DDP, {world} processes, model of {params / 1e6:.1f}M parameters "
              f"(AdamW, fp32), MB per process:")
        print(f"{'rank':>4} {'what':18} {'DDP':>9} {'FSDP':>9} {'ratio':>6}")
        for index, report in enumerate(everyone):
            for what in ("parameters", "gradients", "optimizer state"):
                a, b = report["ddp_held"][what], report["fsdp_held"][what]
                print(f"{index:>4} {what:18} {a / 2**20:>9.1f} {b / 2**20:>9.1f} {b / a:>6.3f}")
            total_a, total_b = sum(report["ddp_held"].values()), sum(report["fsdp_held"].values())
            print(f"{index:>4} {'sum of the three':18} {total_a / 2**20:>9.1f} {total_b / 2**20:>9.1f} "
                  f"{total_b / total_a:>6.3f}")
            print(f"{index:>4} {'peak heap growth':18} {report['ddp_peak'] / 2**20:>9.1f} "
                  f"{report['fsdp_peak'] / 2**20:>9.1f} {report['fsdp_peak'] / report['ddp_peak']:>6.3f}")
        plain = statistics.median(r["plain"] for r in everyone)
        ours = statistics.median(r["drivetrain"] for r in everyone)
        timing_params = sum(p.numel() for p in build("timing").parameters())
        print(f"step time, FSDP{version} FULL_SHARD, model of {timing_params / 1e6:.1f}M parameters, batch {args.batch}: "
              f"plain torch {plain * 1e3:.2f} ms, drivetrain {ours * 1e3:.2f} ms, ratio {ours / plain:.3f} "
              f"(median of {args.trials} interleaved trials x {args.steps - 3} steps per process)")
        assert math.isfinite(ours / plain)
    dist.barrier()


if __name__ == "__main__":
    main()
