"""DDP, FSDP2, tensor parallelism and FSDP2 × TP on the same transformers Llama, per process.

    drivetrain launch --cpu --num-processes 4 benchmarks/bench_parallelism.py [--steps 6]

Every layout trains the same model (random weights, built from a local config) on the same
global batch of ``--global-batch`` sequences per step: DDP and FSDP2 give each process its
share, TP gives every process the whole batch (its peers split the layers instead), FSDP2 × TP
(``dp_shard = N/2, tp = 2``) gives each tensor-parallel pair one share.

Per process and layout it reports:

- ``state MiB``: bytes this process holds in parameters, gradients and AdamW state after the
  last step (each tensor's local shard, counted from the tensors);
- ``peak MiB``: the peak of the C heap in use from building the model to the last step, above
  what was in use before (sampled in a thread);
- ``step ms``: the median of the timed steps (after one warm-up step).

Ratios are against DDP. The figures are the maximum over processes (the slowest and largest
process bounds a step).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM

from drivetrain import Accelerator, FullyShardedDataParallelPlugin, ParallelismConfig
from drivetrain.state import AcceleratorState, GradientState
from common import PeakHeap

MIB = 2 ** 20


def build_model(args: argparse.Namespace) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.width, intermediate_size=args.width * 3,
                         num_hidden_layers=args.layers, num_attention_heads=8, num_key_value_heads=4,
                         max_position_embeddings=args.seq)
    return LlamaForCausalLM(config)


def local_bytes(tensor: torch.Tensor) -> int:
    from torch.distributed.tensor import DTensor

    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return local.numel() * local.element_size()


def held_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    total = 0
    for parameter in model.parameters():
        total += local_bytes(parameter)
        if parameter.grad is not None:
            total += local_bytes(parameter.grad)
    inner = getattr(optimizer, "optimizer", optimizer)
    for state in inner.state.values():
        total += sum(local_bytes(value) for value in state.values() if isinstance(value, torch.Tensor) and value.ndim)
    return total


def layouts(world: int) -> dict[str, dict]:
    chosen = {"DDP": {}, "FSDP2": {"fsdp_plugin": FullyShardedDataParallelPlugin(fsdp_version=2)},
              f"TP={world}": {"parallelism_config": ParallelismConfig(tp_size=world)}}
    if world % 2 == 0 and world > 2:
        chosen[f"FSDP2({world // 2})xTP(2)"] = {
            "parallelism_config": ParallelismConfig(dp_shard_size=world // 2, tp_size=2)}
    return chosen


def run_layout(name: str, kwargs: dict, args: argparse.Namespace) -> tuple[float, float, float]:
    accelerator = Accelerator(**kwargs)
    data_parallel = accelerator.run.data_parallel_size
    per_process = args.global_batch // data_parallel
    generator = torch.Generator().manual_seed(1 + accelerator.data_parallel_rank)
    batches = [torch.randint(0, args.vocab, (per_process, args.seq), generator=generator)
               for _ in range(args.steps + 1)]
    times = []
    with PeakHeap() as heap:
        model = build_model(args)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model, optimizer = accelerator.prepare(model, optimizer)
        for index, batch in enumerate(batches):
            dist.barrier()
            start = time.perf_counter()
            loss = model(input_ids=batch, labels=batch).loss
            accelerator.backward(loss)
            optimizer.step()
            if index < len(batches) - 1:
                optimizer.zero_grad()
            if index:  # the first step warms up
                times.append(time.perf_counter() - start)
    state = held_bytes(model, optimizer)
    accelerator.free_memory()
    del model, optimizer
    gc.collect()
    AcceleratorState._reset_state()
    GradientState._reset_state()
    figures = torch.tensor([state / MIB, heap.growth / MIB, statistics.median(times) * 1000], dtype=torch.float64)
    dist.all_reduce(figures, op=dist.ReduceOp.MAX)
    return tuple(figures.tolist())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=2048)
    args = parser.parse_args()
    torch.set_num_threads(1)
    probe = Accelerator()
    world = probe.num_processes
    AcceleratorState._reset_state()
    GradientState._reset_state()
    if args.global_batch % world:
        raise SystemExit(f"--global-batch must be a multiple of the {world} processes")
    results = {name: run_layout(name, kwargs, args) for name, kwargs in layouts(world).items()}
    if dist.get_rank() == 0:
        base = results["DDP"]
        print(f"{world} processes, Llama width {args.width} x {args.layers} layers, seq {args.seq}, "
              f"global batch {args.global_batch}, {args.steps} timed steps (max over processes)")
        print(f"{'layout':<18}{'state MiB':>10}{'x DDP':>7}{'peak MiB':>10}{'x DDP':>7}{'step ms':>10}{'x DDP':>7}")
        for name, (state, peak, step) in results.items():
            print(f"{name:<18}{state:>10.1f}{state / base[0]:>7.2f}{peak:>10.1f}{peak / max(base[1], 1e-9):>7.2f}"
                  f"{step:>10.1f}{step / base[2]:>7.2f}")


if __name__ == "__main__":
    main()
