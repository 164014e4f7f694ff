"""Which worker really ended first, how, and the last error line it wrote.

A launcher learns of a failure only when its agent polls, and by then the other ranks have
usually failed too (a peer that vanishes breaks their collectives). Error records written by
the workers cannot order a rank that left without writing one (``os._exit``, a signal). So:

- each worker writes its pid to ``<errors>/<rank>.pid`` when it starts, and keeps the last
  line it wrote to ``sys.stderr`` in ``<errors>/<rank>.stderr`` (a small shared memory map:
  no system call per write, and the line survives ``os._exit``). Python warnings and log
  records below ``ERROR`` are written but not kept: a warning printed just before a rank
  died silently is not why it died;
- the launcher, the workers' parent, watches those pids with ``waitid(WNOWAIT)``, which sees a
  process end without reaping it (the agent still collects its exit status as before), and
  notes the time and the exit code or signal;
- when a worker fails, the watcher notes which of the others are stopped (``SIGSTOP``, state
  ``T``): such a rank is why the others timed out, and the report names it. The agent is about
  to end every worker; a stopped one would wait out its grace period (no signal but
  ``SIGKILL`` reaches a stopped process), so the watcher sends it ``SIGTERM`` and ``SIGCONT``.
  A rank that stays stopped after every other rank has ended (successfully) would make the
  agent wait forever: after the collective timeout the watcher kills it.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import signal
import sys
import threading
import time
import warnings
from typing import Any

from .worker_lifetime import stat_fields

_STDERR_SIZE = 4096  # bytes kept of the last stderr line (the first 2 hold its length)


def _rank() -> str:
    return os.environ.get("RANK", "0")


def note_worker_start(errors: str | None) -> None:
    """In a worker: record this pid and keep the last stderr line from now on."""
    if not errors:
        return
    try:
        with open(os.path.join(errors, f"{_rank()}.pid"), "w", encoding="utf-8") as handle:
            handle.write(str(os.getpid()))
        keeper = _LastLine(sys.stderr, os.path.join(errors, f"{_rank()}.stderr"))
        sys.stderr = keeper
        warnings.showwarning = keeper.passing_warnings(warnings.showwarning)
        # every record a logger hands to its handlers, whichever handler writes it to stderr
        logging.Logger.callHandlers = keeper.passing_log_records(logging.Logger.callHandlers)
    except OSError:  # reporting must never stop the worker
        pass


class _LastLine:
    """A text stream that writes through and keeps the last complete non-empty line in a map."""

    def __init__(self, stream: Any, path: str) -> None:
        self._stream = stream
        with open(path, "w+b") as handle:
            handle.truncate(_STDERR_SIZE)
            self._map = mmap.mmap(handle.fileno(), _STDERR_SIZE)
        self._pending = ""
        self._passing_depth = 0

    @contextlib.contextmanager
    def _passing(self) -> Any:
        """What is written meanwhile goes through without being kept."""
        self._passing_depth += 1
        try:
            yield
        finally:
            self._passing_depth -= 1

    def passing_warnings(self, show: Any) -> Any:
        """``show`` (a ``warnings.showwarning``) writing through this stream without being kept."""
        def showwarning(*args: Any, **kwargs: Any) -> None:
            with self._passing():
                show(*args, **kwargs)
        return showwarning

    def passing_log_records(self, call_handlers: Any) -> Any:
        """``call_handlers`` (``logging.Logger.callHandlers``) writing records below ``ERROR``
        without their lines being kept."""
        def callHandlers(logger: logging.Logger, record: logging.LogRecord) -> None:
            if record.levelno >= logging.ERROR:
                return call_handlers(logger, record)
            with self._passing():
                return call_handlers(logger, record)
        return callHandlers

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        if self._passing_depth:
            return written
        if "\n" in text:
            lines = (self._pending + text).split("\n")
            self._pending = lines[-1][-_STDERR_SIZE:]
            last = next((line for line in reversed(lines[:-1]) if line.strip()), None)
            if last is not None:
                data = last.strip().encode("utf-8", "replace")[: _STDERR_SIZE - 2]
                self._map[2: 2 + len(data)] = data
                self._map[0:2] = len(data).to_bytes(2, "little")
        else:
            self._pending = (self._pending + text)[-_STDERR_SIZE:]
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def last_stderr_line(errors: str, rank: int) -> str:
    """The last line worker ``rank`` wrote to ``sys.stderr``, or ``""``."""
    try:
        with open(os.path.join(errors, f"{rank}.stderr"), "rb") as handle:
            data = handle.read(_STDERR_SIZE)
    except OSError:
        return ""
    if len(data) < 2:
        return ""
    size = int.from_bytes(data[:2], "little")
    return data[2: 2 + size].decode("utf-8", "replace")


def describe_exit(code: int | None) -> str:
    """``exited with code 1`` / ``was killed by signal 9 (SIGKILL)``."""
    if code is None:
        return "ended"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-code} ({name})"
    return f"exited with code {code}"


def process_state(pid: int) -> str | None:
    """The state letter of a process (``R``, ``S``, ``T`` for stopped, ...), or ``None`` (gone, not Linux)."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


class ExitWatcher:
    """Notes when each worker that recorded its pid in ``errors`` ends, and how.

    Only a parent can watch its children this way; where ``waitid`` is missing the watcher
    notes nothing and the summary falls back on the workers' own records.
    """

    def __init__(self, errors: str, interval: float = 0.005, stopped_limit: float | None = None) -> None:
        self.errors = errors
        self.interval = interval
        self.stopped_limit = stopped_limit
        self.exits: dict[int, tuple[float, int | None]] = {}
        self.stopped: dict[int, float] = {}  # rank -> since when it was seen stopped while others had ended
        self._left_stopped_since: float | None = None
        self._pids: dict[int, int] = {}
        self._reaped: dict[int, int] = {}  # pid -> exit code, told by the waiter that collected it
        self._lock = threading.Lock()  # the watcher thread and the agent's thread both note ends
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="drivetrain-exit-watcher", daemon=True)

    def __enter__(self) -> "ExitWatcher":
        if hasattr(os, "waitid") and hasattr(os, "WNOWAIT"):
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1)

    def note_reaped(self, pid: int, code: int) -> None:
        """The exit code of worker ``pid`` as the agent that collected it saw it. On a loaded
        machine the agent can collect a worker before this thread sees it end; the watcher then
        knows only that it is gone, and a rank that died with a code would go unreported."""
        with self._lock:
            self._reaped[pid] = code
            for rank, known in self._pids.items():
                if known == pid and rank in self.exits and self.exits[rank][1] is None:
                    self.exits[rank] = (self.exits[rank][0], code)
            # The agent ends every worker right after telling this: a stopped one must be noted
            # (and continued) now, or it waits out the grace period and is reported as only slow.
            if code and not self.stopped:
                self._known_pids()
                self._note_stopped(time.time())

    def _known_pids(self) -> None:
        for name in os.listdir(self.errors):
            if name.endswith(".pid"):
                try:
                    rank = int(name[:-4])
                    if rank not in self._pids:
                        with open(os.path.join(self.errors, name), encoding="utf-8") as handle:
                            self._pids[rank] = int(handle.read().strip())
                except (OSError, ValueError):
                    continue

    def _note_stopped(self, now: float) -> None:
        for rank, pid in self._pids.items():
            if rank not in self.exits and process_state(pid) == "T":
                self.stopped[rank] = now
        for rank in self.stopped:  # the agent ends every worker now; a stopped one only once continued
            try:
                os.kill(self._pids[rank], signal.SIGTERM)
                os.kill(self._pids[rank], signal.SIGCONT)
            except OSError:
                pass

    def _watch(self) -> None:
        # An end is dated when the process was last seen alive, not when it was seen gone: a
        # peer that records the broken connection a moment after the death must come later.
        last_seen_alive = time.time()
        while not self._stop.is_set():
            with self._lock:
                now = self._look(last_seen_alive)
            last_seen_alive = now
            self._stop.wait(self.interval)

    def _look(self, last_seen_alive: float) -> float:
        """One pass over the workers: note those that ended since ``last_seen_alive``; returns now."""
        now = time.time()
        self._known_pids()
        for rank, pid in self._pids.items():
            if rank in self.exits:
                continue
            try:
                result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:  # already collected by the agent: ended by now
                code = self._reaped.get(pid)
            else:
                if result is None or not result.si_pid:
                    continue
                code = -result.si_status if result.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else result.si_status
            self.exits[rank] = (last_seen_alive, code)
            if code and not self.stopped:
                self._note_stopped(now)
        if self.exits and len(self.exits) < len(self._pids):
            self._end_stopped_leftovers(now)
        return now

    def _end_stopped_leftovers(self, now: float) -> None:
        """Every other rank has ended and the rest are stopped: nothing will ever wake them, and the
        agent would wait for them forever. After ``stopped_limit`` seconds (the collective timeout)
        they are killed, so the job fails naming them instead of hanging."""
        left = [rank for rank in self._pids if rank not in self.exits]
        if self.stopped_limit is None or not all(process_state(self._pids[rank]) == "T" for rank in left):
            self._left_stopped_since = None
            return
        if self._left_stopped_since is None:
            self._left_stopped_since = now
        if now - self._left_stopped_since < self.stopped_limit:
            return
        for rank in left:
            self.stopped[rank] = self._left_stopped_since
            try:
                os.kill(self._pids[rank], signal.SIGKILL)
            except OSError:
                pass
