"""A few threads for checkpoint file I/O.

Writing a file fills the page cache and reading one fills fresh tensors: both are mostly
kernel work (allocating, zeroing and copying pages) done without the GIL, so files written
or read side by side finish in about 1/N of the time on N cores. Writes into one file are
serialized by the kernel, which is why large states are split into several files
(:func:`shard_bytes`).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, TypeVar

import torch

T = TypeVar("T")
_MIN_SHARD = 64 * 2**20
# Each thread gets a few files, so one large file cannot leave the others idle at the end.
_FILES_PER_THREAD = 4


def io_threads() -> int:
    """Threads for checkpoint I/O: ``DRIVETRAIN_CHECKPOINT_THREADS``, else up to 4 (the cores here)."""
    from ...kernel import environment

    threads = environment.read_int("CHECKPOINT_THREADS", default=None)
    if threads is None:
        return max(1, min(4, os.cpu_count() or 1))
    return max(1, threads)


def tensor_bytes(tree: Any) -> int:
    """Bytes of the tensors in a nested state (dicts, lists, tuples)."""
    if isinstance(tree, torch.Tensor):
        return tree.numel() * tree.element_size()
    if isinstance(tree, dict):
        return sum(tensor_bytes(value) for value in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(tensor_bytes(value) for value in tree)
    return 0


def shard_bytes(total: int, threads: int) -> int:
    """The file size that spreads ``total`` bytes over ``threads`` threads evenly enough."""
    if threads <= 1:
        return max(total, 1)
    return max(_MIN_SHARD, math.ceil(total / (threads * _FILES_PER_THREAD)))


class FileJobs:
    """Run file reads and writes on a thread pool; the caller collects them with :meth:`wait`.

    With one thread everything runs at once in the calling thread, which keeps tracebacks
    and profiles simple.
    """

    def __init__(self, threads: int | None = None) -> None:
        self.threads = io_threads() if threads is None else max(1, threads)
        self._executor = (ThreadPoolExecutor(self.threads, thread_name_prefix="drivetrain-checkpoint-io")
                          if self.threads > 1 else None)
        self._pending: list[Future] = []

    def submit(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> Future:
        future: Future | None = None
        if self._executor is not None:
            try:
                future = self._executor.submit(function, *args, **kwargs)
            except RuntimeError:
                # The interpreter is shutting down (a script that ended right after a
                # non-blocking save_state): pools take no new work, so the commit's thread
                # writes its files itself.
                self._executor.shutdown(wait=False)
                self._executor = None
        if future is None:
            future = Future()
            try:
                future.set_result(function(*args, **kwargs))
            except BaseException as error:  # collected by wait(), like a pooled job's
                future.set_exception(error)
        self._pending.append(future)
        return future

    def wait(self) -> None:
        """Wait for every job submitted so far; raise the first error once all have ended."""
        pending, self._pending = self._pending, []
        first_error = None
        for future in pending:
            error = future.exception()
            if error is not None and first_error is None:
                first_error = error
        if first_error is not None:
            raise first_error

    def close(self) -> None:
        try:
            self.wait()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)

    def __enter__(self) -> FileJobs:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if exc_info[0] is None:
            self.close()
        else:  # already failing: finish the jobs, keep the first error
            try:
                self.close()
            except BaseException:
                pass
