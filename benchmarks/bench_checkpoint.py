"""save_state / load_state of a ~100M-parameter model with AdamW against plain torch.save /
torch.load of the same state, in the same run, beside the disk's own write speed.

    python benchmarks/bench_checkpoint.py [--directory DIR] [--repeats 3]

Target: save_state in at most 0.6x the time of one torch.save of the same state, crash
safety (temporary directory, fsync, atomic rename) included; load_state no slower than
torch.load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import torch

from drivetrain import Accelerator


def build(parameters: int) -> torch.nn.Module:
    width = 2048
    layers = max(parameters // (width * width), 1)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])


def disk_write_speed(directory: str, size: int = 512 * 2**20) -> float:
    """MB/s of writing ``size`` bytes and fsyncing them."""
    block = os.urandom(8 * 2**20)
    path = os.path.join(directory, "disk-speed.bin")
    start = time.perf_counter()
    with open(path, "wb") as handle:
        for _ in range(size // len(block)):
            handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())
    elapsed = time.perf_counter() - start
    os.remove(path)
    return size / elapsed / 1e6


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def drop_page_cache_hint(path: str) -> None:
    """Ask the kernel to forget cached pages of a checkpoint, so loads read the disk alike."""
    for root, _dirs, files in os.walk(path) if os.path.isdir(path) else [(os.path.dirname(path), [], [os.path.basename(path)])]:
        for name in files:
            try:
                descriptor = os.open(os.path.join(root, name), os.O_RDONLY)
                os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(descriptor)
            except (OSError, AttributeError):
                pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--directory", default=None)
    parser.add_argument("--parameters", type=int, default=100_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    directory = args.directory or tempfile.mkdtemp(prefix="drivetrain-bench-")
    os.makedirs(directory, exist_ok=True)

    accelerator = Accelerator()
    model = build(args.parameters)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    model(torch.randn(4, 2048)).sum().backward()
    optimizer.step()  # creates the AdamW moments
    optimizer.zero_grad()
    params = sum(p.numel() for p in model.parameters())
    state_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values()) + sum(
        v.numel() * v.element_size() for s in optimizer.state_dict()["state"].values() for v in s.values()
        if isinstance(v, torch.Tensor))

    plain_path = os.path.join(directory, "plain.pt")
    ours_path = os.path.join(directory, "checkpoint")
    save_plain, save_ours, load_plain, load_ours = [], [], [], []
    def plain_save():
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, plain_path)

    for repeat in range(args.repeats):
        # Each save starts with no dirty pages of the other pending, into a fresh file (torch.save)
        # or a fresh directory replacing the previous checkpoint (save_state, as in training).
        for name in (("plain", "ours") if repeat % 2 == 0 else ("ours", "plain")):
            if name == "plain" and os.path.exists(plain_path):
                os.remove(plain_path)
            os.sync()
            if name == "plain":
                save_plain.append(timed(plain_save))
            else:
                save_ours.append(timed(lambda: accelerator.save_state(ours_path)))
        os.sync()
        drop_page_cache_hint(plain_path)
        drop_page_cache_hint(ours_path)

        def plain_load():
            state = torch.load(plain_path, weights_only=True)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])

        load_plain.append(timed(plain_load))
        load_ours.append(timed(lambda: accelerator.load_state(ours_path)))
    disk = disk_write_speed(directory)
    megabytes = state_bytes / 1e6
    sp, so = statistics.median(save_plain), statistics.median(save_ours)
    lp, lo = statistics.median(load_plain), statistics.median(load_ours)
    print(f"state: {params / 1e6:.1f}M parameters + AdamW = {megabytes:.0f} MB; disk write speed (fsync): {disk:.0f} MB/s")
    print(f"{'':22} {'seconds':>8} {'MB/s':>8} {'ratio':>7}")
    print(f"{'torch.save':22} {sp:>8.2f} {megabytes / sp:>8.0f} {1:>7.2f}")
    fsync = os.environ.get("DRIVETRAIN_CHECKPOINT_FSYNC", "1").lower() not in ("0", "false", "no", "off")
    label = f"save_state (fsync {'on' if fsync else 'off'})"
    print(f"{label:22} {so:>8.2f} {megabytes / so:>8.0f} {so / sp:>7.2f}")
    print(f"{'torch.load':22} {lp:>8.2f} {megabytes / lp:>8.0f} {1:>7.2f}")
    print(f"{'load_state':22} {lo:>8.2f} {megabytes / lo:>8.0f} {lo / lp:>7.2f}")
    if args.directory is None:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
