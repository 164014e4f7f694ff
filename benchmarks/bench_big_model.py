"""Big-model inference against plain PyTorch: load time, peak host memory, hook overhead.

    python benchmarks/bench_big_model.py [--size-gb 1.2] [--dir PATH]

1. Loading a model of ``--size-gb`` (fp32 linear layers; sharded safetensors for drivetrain,
   one ``torch.save`` file for PyTorch): plain PyTorch (build the model, ``torch.load`` the
   whole state dict, ``load_state_dict``) against ``init_empty_weights`` +
   ``load_checkpoint_and_dispatch`` with the weights on disk (all of them, and three
   quarters with a quarter kept in memory), each followed by one forward. Each case runs in
   a fresh process, so its peak RSS (``VmHWM``) is its own; the RSS after imports is
   printed beside it.
2. Forward overhead of the hooks on a model that fits in memory: the same model with an
   ``AlignDevicesHook`` on every block (``force_hooks``) against plain forward.
3. Building the offload weights map of a many-expert model: 20,000 weights kept in memory
   and 20,000 on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from common import status_mb

WIDTH = 4096


class Stack(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def _rss_mb() -> float:
    return status_mb("VmRSS")


def _peak_mb() -> float:
    return status_mb("VmHWM")


def _case(kind: str, directory: Path, layers: int) -> dict:
    """One measured case, in this (fresh) process."""
    from drivetrain import init_empty_weights, load_checkpoint_and_dispatch
    from drivetrain.utils.modeling import compute_module_sizes

    x = torch.randn(4, WIDTH, generator=torch.Generator().manual_seed(0))
    base = _rss_mb()
    start = time.perf_counter()
    if kind == "plain":
        model = Stack(layers)
        model.load_state_dict(torch.load(directory / "plain.bin", map_location="cpu", weights_only=True))
    else:
        with init_empty_weights():
            model = Stack(layers)
        size = compute_module_sizes(model)[""]
        if kind == "all_disk":
            device_map = {"": "disk"}
        else:
            keep = int(size * 0.25)
            device_map = "sequential"
        model = load_checkpoint_and_dispatch(model, directory / "sharded", device_map=device_map,
                                             max_memory=None if kind == "all_disk" else {"cpu": keep})
    loaded = time.perf_counter() - start
    with torch.no_grad():
        start = time.perf_counter()
        out = model(x)
        forward = time.perf_counter() - start
    return {"kind": kind, "load_s": loaded, "forward_s": forward, "peak_rss_mb": _peak_mb(), "rss_after_imports_mb": base,
            "checksum": float(out.double().sum())}


def _prepare(directory: Path, layers: int) -> None:
    from drivetrain.checkpointing.safetensors_io import write_safetensors

    torch.manual_seed(0)
    model = Stack(layers)
    state = model.state_dict()
    torch.save(state, directory / "plain.bin")
    sharded = directory / "sharded"
    sharded.mkdir(exist_ok=True)
    names = list(state)
    per_shard = 4  # two layers (weights and biases) per shard: about 134 MB
    weight_map = {}
    for number, first in enumerate(range(0, len(names), per_shard), 1):
        file_name = f"model-{number:05d}.safetensors"
        chunk = {n: state[n] for n in names[first:first + per_shard]}
        write_safetensors(sharded / file_name, chunk, metadata={"format": "pt"}, fsync=False)
        weight_map.update(dict.fromkeys(chunk, file_name))
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def _hook_overhead(repeats: int) -> tuple[float, float]:
    """Median forward time of the plain model and of a hooked copy, called alternately so
    that load from other processes affects both alike."""
    import copy

    from drivetrain import dispatch_model

    torch.manual_seed(0)
    plain = Stack(6).eval()  # 400 MB, fits in memory
    hooked = dispatch_model(copy.deepcopy(plain), {f"layers.{i}": "cpu" for i in range(6)}, force_hooks=True)
    assert hasattr(hooked.layers[0], "_hf_hook")
    x = torch.randn(16, WIDTH)
    times: dict[str, list[float]] = {"plain": [], "hooked": []}
    with torch.no_grad():
        for model in (plain, hooked):
            model(x)
        for _ in range(repeats):
            for name, model in (("plain", plain), ("hooked", hooked)):
                start = time.perf_counter()
                model(x)
                times[name].append(time.perf_counter() - start)
    print(f"  (best: plain {min(times['plain']) * 1e3:.1f} ms, hooked {min(times['hooked']) * 1e3:.1f} ms, "
          f"{min(times['hooked']) / min(times['plain']):.3f}x)")
    return statistics.median(times["plain"]), statistics.median(times["hooked"])


def _offload_index(count: int) -> tuple[float, float]:
    """Best of 5: selecting the in-memory weights of the CPU-mapped modules, and building the
    weights map over them and the disk index (the step that compares names)."""
    from drivetrain.utils.offload import OffloadedWeightsLoader, extract_submodules_state_dict

    state = {f"model.experts.{i}.weight": torch.empty(1) for i in range(count)}
    disk_index = {f"model.experts.{i}.weight": {"dtype": "float32", "shape": [1]} for i in range(count, 2 * count)}
    cpu_modules = [f"model.experts.{i}" for i in range(count)]
    extract, build = [], []
    for _ in range(5):
        start = time.perf_counter()
        kept = extract_submodules_state_dict(state, cpu_modules)
        middle = time.perf_counter()
        loader = OffloadedWeightsLoader(state_dict=kept, save_folder="unused", index=disk_index)
        build.append(time.perf_counter() - middle)
        extract.append(middle - start)
        assert len(loader) == 2 * count
    return min(extract), min(build)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=1.2)
    parser.add_argument("--dir", default=None, help="where to write the checkpoints (default: a temporary folder)")
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--layers", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(_case(args.case, Path(args.dir), args.layers)))
        return

    layers = max(1, round(args.size_gb * 1e9 / ((WIDTH * WIDTH + WIDTH) * 4)))
    size_mb = layers * (WIDTH * WIDTH + WIDTH) * 4 / 2**20
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        directory = Path(scratch)
        _prepare(directory, layers)
        print(f"model: {layers} x Linear({WIDTH}, {WIDTH}) fp32 = {size_mb:.0f} MiB")
        print(f"{'case':<26}{'load s':>9}{'forward s':>11}{'peak RSS MiB':>14}{'RSS after imports':>19}{'peak/model':>12}")
        results = {}
        for kind in ("plain", "all_disk", "quarter_cpu"):
            env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
            output = subprocess.run([sys.executable, __file__, "--case", kind, "--dir", str(directory),
                                     "--layers", str(layers)], capture_output=True, text=True, env=env, check=True)
            result = json.loads(output.stdout.strip().splitlines()[-1])
            results[kind] = result
            label = {"plain": "plain PyTorch", "all_disk": "drivetrain, all on disk",
                     "quarter_cpu": "drivetrain, 1/4 cpu 3/4 disk"}[kind]
            print(f"{label:<26}{result['load_s']:>9.2f}{result['forward_s']:>11.2f}{result['peak_rss_mb']:>14.0f}"
                  f"{result['rss_after_imports_mb']:>19.0f}{result['peak_rss_mb'] / size_mb:>12.2f}")
        same = len({round(r["checksum"], 3) for r in results.values()}) == 1
        print(f"outputs identical across cases: {same}")

    plain, hooked = _hook_overhead(repeats=31)
    print(f"forward, model in memory: plain {plain * 1e3:.1f} ms, with hooks on every block {hooked * 1e3:.1f} ms "
          f"({hooked / plain:.3f}x)")
    extract, build = _offload_index(20_000)
    print(f"offload index of 20,000 in-memory + 20,000 disk weights (best of 5): weights map {build * 1e3:.1f} ms, "
          f"plus {extract * 1e3:.1f} ms selecting the in-memory weights ({(build + extract) * 1e3:.1f} ms in all)")


if __name__ == "__main__":
    main()
