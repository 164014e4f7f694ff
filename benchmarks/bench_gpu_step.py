"""GPU training-step time of drivetrain against the same loop in plain PyTorch.

Each measurement is a process of its own (so neither loop inherits the other's allocator or
compiled kernels), run in the order plain, drivetrain, drivetrain, plain (ABBA, repeated), so
that drift of clocks and temperature hits both alike. A window is timed between two
``torch.cuda.synchronize()`` calls after warm-up steps: a step that waits for the device
(a ``.item()`` in the step path) shows up as the device idling while the CPU catches up.

    python benchmarks/bench_gpu_step.py                      # every case, on the GPU
    python benchmarks/bench_gpu_step.py --case mlp-fp32 --repeats 3
    python benchmarks/bench_gpu_step.py --device cpu --steps 3 --warmup 1 --repeats 1   # smoke run

Cases (targets, from the issue that asked for this):

| case | target |
| --- | --- |
| transformer-fp16: 12 layers, d=1024, seq 512, batch 16, fp16 autocast + GradScaler | <= 1.01x |
| transformer-bf16: same, bf16 autocast | <= 1.01x |
| mlp-fp32: 3 linear layers of 256, batch 64, fp32 (framework overhead visible) | <= 1.05x |
| mlp-bf16: same, bf16 autocast | <= 1.05x |
| fsdp2-bf16: the transformer under FSDP2 (fully_shard) on one GPU, bf16 | time and peak memory |

Prints ms/step of every run, the medians, their ratio and the peak device memory. Without a
CUDA device it says so and exits 0 (the CPU smoke mode checks the script itself).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

CASES = ("transformer-fp16", "transformer-bf16", "mlp-fp32", "mlp-bf16", "fsdp2-bf16")
TARGETS = {"transformer-fp16": 1.01, "transformer-bf16": 1.01, "mlp-fp32": 1.05, "mlp-bf16": 1.05,
           "fsdp2-bf16": None}


# ------------------------------------------------------------------ one measurement (a worker process)


def _shape(case: str, device: str) -> dict:
    small = device == "cpu"  # the smoke mode checks the logic, not the numbers
    if case.startswith(("transformer", "fsdp2")):
        return {"kind": "transformer", "d": 64 if small else 1024, "layers": 2 if small else 12,
                "seq": 16 if small else 512, "batch": 4 if small else 16}
    return {"kind": "mlp", "width": 256, "layers": 3, "batch": 64}


def _build(shape: dict):
    import torch

    torch.manual_seed(0)
    if shape["kind"] == "mlp":
        width = shape["width"]
        layers = [torch.nn.Linear(width, width) if i % 2 == 0 else torch.nn.ReLU()
                  for i in range(2 * shape["layers"] - 1)]
        return torch.nn.Sequential(*layers)
    d = shape["d"]
    layer = torch.nn.TransformerEncoderLayer(d, nhead=max(d // 64, 1), dim_feedforward=4 * d, batch_first=True,
                                             dropout=0.0)
    return torch.nn.TransformerEncoder(layer, shape["layers"], enable_nested_tensor=False)


def _inputs(shape: dict, device, count: int):
    import torch

    generator = torch.Generator().manual_seed(1)
    if shape["kind"] == "mlp":
        size = (shape["batch"], shape["width"])
    else:
        size = (shape["batch"], shape["seq"], shape["d"])
    return [torch.randn(size, generator=generator).to(device) for _ in range(count)]


def _precision(case: str) -> str:
    return case.rsplit("-", 1)[1]


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _plain(case: str, device, shape: dict):
    """The loop a user writes with torch alone; returns ``step()`` and the model."""
    import torch

    precision = _precision(case)
    model = _build(shape).to(device)
    if case.startswith("fsdp2"):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.layers:
            fully_shard(layer, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    autocast = dtype is not None and not case.startswith("fsdp2")
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None

    def step(x) -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=autocast):
            out = model(x)
        loss = out.float().pow(2).mean()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _drivetrain(case: str, device, shape: dict):
    """The same loop written for drivetrain (Accelerate's API)."""
    import torch

    from drivetrain import Accelerator

    precision = _precision(case)
    options = {}
    if case.startswith("fsdp2"):
        from drivetrain import FullyShardedDataParallelPlugin

        options["fsdp_plugin"] = FullyShardedDataParallelPlugin(
            fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
            transformer_cls_names_to_wrap=["TransformerEncoderLayer"])
    accelerator = Accelerator(mixed_precision=None if precision == "fp32" else precision,
                              cpu=device.type == "cpu", **options)
    model = _build(shape)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)

    def step(x) -> None:
        with accelerator.accumulate(model):
            loss = model(x).float().pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()

    return step


def _join_one_process_group(device) -> None:
    """FSDP2 needs a process group, even of one."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)


def worker(args: argparse.Namespace) -> None:
    import torch

    device = torch.device(args.device)
    case = args.case[0]
    shape = _shape(case, args.device)
    if case.startswith("fsdp2"):
        _join_one_process_group(device)
    build = _plain if args.worker == "plain" else _drivetrain
    step = build(case, device, shape)
    data = _inputs(shape, device, 8)
    for i in range(args.warmup):
        step(data[i % len(data)])
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for i in range(args.steps):
        step(data[i % len(data)])
    _sync(device)
    elapsed = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None
    print("RESULT " + json.dumps({"ms": 1000 * elapsed / args.steps, "peak_mb": peak}), flush=True)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


# ------------------------------------------------------------------ the comparison (the parent process)


def measure(case: str, which: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--worker", which, "--case", case, "--device", args.device,
               "--steps", str(args.steps), "--warmup", str(args.warmup)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRIVETRAIN_", "ACCELERATE_"))}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        env.pop(name, None)
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"{case} ({which}) failed with code {result.returncode}:\n{result.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def compare(case: str, args: argparse.Namespace) -> dict:
    runs: dict[str, list[dict]] = {"plain": [], "drivetrain": []}
    for _ in range(args.repeats):
        for which in ("plain", "drivetrain", "drivetrain", "plain"):
            runs[which].append(measure(case, which, args))
    plain = statistics.median(r["ms"] for r in runs["plain"])
    ours = statistics.median(r["ms"] for r in runs["drivetrain"])
    peaks = {k: max((r["peak_mb"] or 0) for r in v) for k, v in runs.items()}
    return {"case": case, "plain_ms": plain, "drivetrain_ms": ours, "ratio": ours / plain,
            "plain_runs": [round(r["ms"], 3) for r in runs["plain"]],
            "drivetrain_runs": [round(r["ms"], 3) for r in runs["drivetrain"]],
            "plain_peak_mb": peaks["plain"], "drivetrain_peak_mb": peaks["drivetrain"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=CASES, help="one case (repeatable); default: all")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--steps", type=int, default=50, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2, help="ABBA rounds per case")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    parser.add_argument("--worker", choices=("plain", "drivetrain"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device here: this benchmark measures GPU steps, nothing to measure "
                  "(`--device cpu --steps 3 --warmup 1 --repeats 1` checks the script itself)")
            return 0
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'case':<18}{'plain ms':>10}{'drivetrain ms':>15}{'ratio':>8}{'target':>8}"
          f"{'plain MB':>10}{'drivetrain MB':>15}  runs (plain | drivetrain)")
    for case in args.case or CASES:
        row = compare(case, args)
        target = TARGETS[case]
        print(f"{case:<18}{row['plain_ms']:>10.3f}{row['drivetrain_ms']:>15.3f}{row['ratio']:>7.3f}x"
              f"{(f'{target:.2f}x' if target else '-'):>8}{row['plain_peak_mb']:>10.0f}"
              f"{row['drivetrain_peak_mb']:>15.0f}  {row['plain_runs']} | {row['drivetrain_runs']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
