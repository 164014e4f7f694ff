"""What the benchmarks share: a process's RSS and peak RSS, peak heap memory of a block, and the
timed drivetrain step loop."""

from __future__ import annotations

import ctypes
import gc
import threading
import time
from typing import Callable

import psutil


def status_mb(field: str) -> float:
    """A memory field of this process's ``/proc/self/status`` in MiB (``VmRSS``; ``VmHWM``, its
    own high-water mark: ru_maxrss would also count the parent's memory at fork time)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def heap_in_use() -> Callable[[], int]:
    """Bytes the C heap has handed out and not had back (glibc's mallinfo2), or RSS.

    Resident memory keeps what a previous loop freed, so it cannot compare two loops run one
    after the other; the heap's in-use count can.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")

        class MallInfo2(ctypes.Structure):
            _fields_ = [(name, ctypes.c_size_t) for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                "keepcost")]

        libc.mallinfo2.restype = MallInfo2

        def in_use() -> int:
            info = libc.mallinfo2()
            return info.uordblks + info.hblkhd

        in_use()
        return in_use
    except (OSError, AttributeError):
        process = psutil.Process()
        return lambda: process.memory_info().rss


class PeakHeap:
    """Samples heap memory in use in a thread; reports the peak above the start."""

    def __init__(self, interval: float = 0.0005) -> None:
        self.interval, self.measure = interval, heap_in_use()

    def __enter__(self) -> "PeakHeap":
        gc.collect()
        self.start = self.peak = self.measure()
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.measure())
            time.sleep(self.interval)

    def __exit__(self, *exc) -> None:
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, self.measure())
        self.growth = self.peak - self.start


def timed_drivetrain_steps(accelerator, model, optimizer, data) -> list[float]:
    """Prepare ``model``/``optimizer`` and time one MSE training step per ``(x, y)`` of ``data``."""
    import torch

    model, optimizer = accelerator.prepare(model, optimizer)
    times = []
    for x, y in data:
        start = time.perf_counter()
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    accelerator.free_memory()
    return times
