"""Which collective each process is in, so that a hung job says where it hangs.

A collective that a peer never joins blocks until the run's collective timeout, and then the
backend says only "recv" or "Timed out". To name the collective, its shapes and the line of the
script that called it, every collective drivetrain issues, and every ``torch.distributed`` call
the script makes (the communication plugin wraps them, :func:`watched`), notes itself in a
per-thread record while it runs: a list push and pop, nothing is formatted until a report.

A report (one JSON file per rank, ``<errors>/<rank>.collective.json``, where the launcher
collects the failure records; logged instead when nothing launched the process) is written:

- when a collective raises (gloo raises after the timeout; a peer that died breaks the
  connection): the failing rank then waits a moment (:data:`PEER_WAIT`) for the others' reports
  before it raises, since the launcher ends every worker once one has ended;
- by a watchdog thread, when a collective has run longer than the timeout and has still not
  returned (a backend stuck in C code that never raises);
- by the same thread when another rank of this machine wrote one: a rank that never arrived
  (it is computing, sleeping, waiting on a lock, in another collective) says where it is.

Each process writes one report in its life: after a hang the job ends.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import runpy
import sys
import threading
import time
import traceback
from typing import Any, Callable, Iterator

logger = logging.getLogger(__name__)

#: Directory where each process of a job writes the error that ended it (set by launchers; the
#: child points it at its attempt's folder).
ERRORS_DIR_VARIABLE = "DRIVETRAIN_ERRORS_DIR"
#: Each rank's report file in that folder: ``<rank>`` + this.
REPORT_SUFFIX = ".collective.json"
#: Seconds a rank whose collective failed waits for the other ranks' reports before it raises.
PEER_WAIT = 5.0
#: Most frames of a Python stack kept in a report (the innermost).
STACK_FRAMES = 40
#: Modules whose frames are not the script's call site (the first name of ``__name__``).
_LIBRARY_MODULES = ("torch", "runpy", "threading", "importlib", "contextlib", "functools")


# One collective in progress on one thread: a plain tuple, made on every collective (nothing is
# computed for it until a report): (op, args, kwargs, group position, started, sequence, via).
_OP, _ARGS, _KWARGS, _GROUP_POSITION, _STARTED, _SEQUENCE, _VIA = range(7)
_Entry = tuple


def _group_in(args: tuple, kwargs: dict, position: int | None) -> Any:
    """The argument named ``group`` of a call, at ``position`` when passed by position."""
    if "group" in kwargs:
        return kwargs["group"]
    return args[position] if position is not None and len(args) > position else None


class _Thread(threading.local):
    def __init__(self) -> None:
        self.stack: list[_Entry] = []
        _stacks[threading.get_ident()] = self.stack


_stacks: dict[int, list[_Entry]] = {}  # thread id -> its collectives in progress, outermost first
_local = _Thread()
# outermost collectives begun on this process, per group (``None``: all ranks): ranks in step agree
_counters: dict[Any, int] = {None: 0}
_report_lock = threading.Lock()
_reported: list[dict] = []  # the one report this process wrote
#: How a group object is shown (the communication plugin sets it): ranks, or ``None`` for all.
group_ranks: Callable[[Any], list[int] | None] = lambda group: None


def watched(op: str, function: Callable, group_position: int | None = None) -> Callable:
    """``function`` (a collective) noting itself while it runs, and reporting when it raises a
    ``RuntimeError`` (what backends raise; an error class whose ``collective_report`` is false,
    one every rank raised with a clear message, is not reported). Its group is its argument
    named ``group`` (at ``group_position`` when passed by position)."""
    if getattr(function, "__drivetrain_watched__", False):
        return function
    monotonic, counters = time.monotonic, _counters
    from torch.compiler import is_compiling

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if is_compiling():  # traced by torch.compile: the library's own function, which it knows how to trace
            return function(*args, **kwargs)
        stack = _local.stack
        if stack:  # inside another collective: the same call, counted once
            outer = stack[0]
            stack.append((op, args, kwargs, group_position, outer[4], outer[5], outer[6] or outer[0]))
        else:
            # inline: this runs on every collective
            group = kwargs.get("group") if kwargs else None
            if group is None and group_position is not None and len(args) > group_position:
                group = args[group_position]
            key = None if group is None else id(group)
            sequence = counters[key] = counters[key] + 1 if key in counters else 1
            stack.append((op, args, kwargs, group_position, monotonic(), sequence, None))
        try:
            return function(*args, **kwargs)
        except RuntimeError as error:  # what a backend raises; a TypeError is the caller's, before any exchange
            if getattr(error, "collective_report", True):
                collective_failed(error)
            raise
        finally:
            stack.pop()

    wrapper.__drivetrain_watched__ = True  # type: ignore[attr-defined]
    return wrapper


# every watched function's frame runs this code (taken without calling watched: no torch import)
_WRAPPER_CODE = next(const for const in watched.__code__.co_consts
                     if getattr(const, "co_name", None) == "wrapper")


def watch_module_functions(module: Any, names: Any, group_ranks_of: Callable[[Any], list[int] | None] | None = None
                           ) -> None:
    """Replace each function ``names`` of ``module`` (those it has) by a :func:`watched` one,
    whose group is its argument named ``group``; ``group_ranks_of`` shows a group as its ranks.

    Only the module's attribute changes: the library's own internal calls keep the original
    functions, so one call the script makes is noted once."""
    import inspect

    global group_ranks
    if group_ranks_of is not None:
        group_ranks = group_ranks_of
    for name in names:
        function = getattr(module, name, None)
        if function is None or getattr(function, "__drivetrain_watched__", False):
            continue
        try:
            position = list(inspect.signature(function).parameters).index("group")
        except (TypeError, ValueError):
            position = None
        setattr(module, name, watched(name, function, position))


def current(thread: int | None = None) -> _Entry | None:
    """The innermost collective in progress on ``thread`` (this one by default), if any."""
    stack = _stacks.get(threading.get_ident() if thread is None else thread)
    return stack[-1] if stack else None


# ------------------------------------------------------------------------- the report


def _describe_value(value: Any) -> str | None:
    import torch

    if isinstance(value, torch.Tensor):
        return f"{list(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, (list, tuple)) and value and all(isinstance(item, torch.Tensor) for item in value):
        shown = [_describe_value(item) for item in value[:4]]
        more = f", ... ({len(value)} tensors)" if len(value) > 4 else ""
        return "[" + ", ".join(str(item) for item in shown) + more + "]"
    return None


def _tensors(entry: _Entry) -> list[str]:
    described = [_describe_value(value) for value in (*entry[_ARGS], *entry[_KWARGS].values())]
    return [text for text in described if text is not None]


def _is_library(frame: Any) -> bool:
    name = str(frame.f_globals.get("__name__", ""))
    return name.startswith("drivetrain") or name.split(".")[0] in _LIBRARY_MODULES


def call_site(frame: Any) -> str | None:
    """``file:line in function`` of the innermost frame outside drivetrain and torch, and outside
    the collective in progress (from the caller of the outermost :func:`watched` on)."""
    outermost, walking = None, frame
    while walking is not None:
        if walking.f_code is _WRAPPER_CODE:
            outermost = walking
        walking = walking.f_back
    frame = outermost.f_back if outermost is not None else frame
    while frame is not None:
        if not _is_library(frame):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return None


def _stack_of(frame: Any) -> list[str]:
    """The stack of ``frame``, innermost last, without this module's own frames (the report
    being written, the wrapper around the collective) and, when the script was run by ``runpy``
    (``drivetrain launch``'s child, ``python -m``), without the frames that ran it."""
    frames = [entry for entry in traceback.extract_stack(frame) if entry.filename != __file__]
    ran_by = [index for index, entry in enumerate(frames) if entry.filename in ("<frozen runpy>", runpy.__file__)]
    if ran_by:
        frames = frames[ran_by[-1] + 1:]
    return [line.rstrip("\n") for line in traceback.format_list(frames[-STACK_FRAMES:])]


def build_report(trigger: str, rank: int, error: str | None = None, frame: Any = None) -> dict:
    """What this process is doing now: its collective in progress (on the thread that has one,
    else the main thread), where the script called it, and that thread's Python stack; or, given
    ``frame`` (where an error was raised), where that was."""
    entry = None
    if frame is None:
        frames = sys._current_frames()
        threads = [ident for ident, stack in _stacks.items() if stack and ident in frames]
        thread = threads[0] if threads else threading.main_thread().ident
        frame = frames.get(thread)
        entry = current(thread)
    collective = None
    if entry is not None:
        try:
            ranks = group_ranks(_group_in(entry[_ARGS], entry[_KWARGS], entry[_GROUP_POSITION]))
        except Exception:  # a group being destroyed: shown as unknown, the report still written
            ranks = None
        collective = {"op": entry[_OP], "via": entry[_VIA], "sequence": entry[_SEQUENCE], "tensors": _tensors(entry),
                      "group": ranks, "waited": round(time.monotonic() - entry[_STARTED], 3)}
    return {
        "rank": rank, "time": time.time(), "trigger": trigger, "error": error, "collective": collective,
        "call_site": call_site(frame), "stack": _stack_of(frame) if frame is not None else [],
        "pid": os.getpid(),
    }


def _errors_dir() -> str | None:
    return os.environ.get(ERRORS_DIR_VARIABLE) or None


def _rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def write_report(trigger: str, error: str | None = None, frame: Any = None) -> bool:
    """Write this process's report (once in its life); returns whether this call wrote it."""
    with _report_lock:
        if _reported:
            return False
        report = build_report(trigger, _rank(), error, frame)
        _reported.append(report)
    errors = _errors_dir()
    if errors is None:
        logger.error("rank %d is in %s", report["rank"], one_line(report))
        return True
    path = os.path.join(errors, f"{report['rank']}{REPORT_SUFFIX}")
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(report, handle)
        os.replace(path + ".tmp", path)  # the launcher never reads half a report
    except OSError as failure:  # reporting must never hide the error itself
        logger.debug("could not write the collective report %s: %s", path, failure)
    return True


def one_line(report: dict) -> str:
    """``all_reduce [4] float32 (group all ranks) at train.py:12 in main`` / ``no collective at ...``."""
    collective = report.get("collective")
    where = f" at {report['call_site']}" if report.get("call_site") else ""
    if not collective:
        return f"no collective{where}"
    via = f" (in {collective['via']})" if collective.get("via") else ""
    tensors = " ".join(collective.get("tensors") or [])
    group = collective.get("group")
    group_text = f", group {group}" if group else ""
    return f"{collective['op']}{via} {tensors}{group_text}".rstrip() + where


def _error_line(error: BaseException) -> str:
    line = next((text.strip() for text in str(error).splitlines() if text.strip()), "")
    line = re.sub(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*", "", line)  # the backend's C++ source location
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


#: An error that says a collective waited too long (torch's own collectives run from C++, such as
#: the gradient all-reduce of DistributedDataParallel, raise it outside any recorded call).
_TIMEOUT = re.compile(r"timed out|timeout", re.IGNORECASE)


def report_uncaught(error: BaseException) -> None:
    """The script ended with ``error``: if it is a collective's timeout that no recorded call
    reported, report where it was raised (the line of the script and the stack), so the other
    ranks report where they are too."""
    if _reported or _watch[0] is None or not _TIMEOUT.search(str(error)):
        return
    traceback_ = error.__traceback__
    while traceback_ is not None and traceback_.tb_next is not None:
        traceback_ = traceback_.tb_next
    if write_report("error", _error_line(error), traceback_.tb_frame if traceback_ is not None else None):
        _wait_for_peers()


def collective_failed(error: BaseException) -> None:
    """A collective raised on this thread: write the report, then give the other ranks a moment
    to write theirs (:data:`PEER_WAIT`) before the error ends this process."""
    if write_report("error", _error_line(error)):
        _wait_for_peers()


def _wait_for_peers() -> None:
    """Until every rank's report is there, or :data:`PEER_WAIT` seconds."""
    errors, watch = _errors_dir(), _watch[0]
    if errors is None or watch is None or watch.world_size < 2:
        return
    deadline = time.monotonic() + PEER_WAIT
    while time.monotonic() < deadline and len(_reports_in(errors)) < watch.world_size:
        time.sleep(0.05)


def rank_records(errors: str, suffix: str) -> Iterator[tuple[int, Any]]:
    """``(rank, JSON)`` of each ``<rank><suffix>`` file in ``errors`` that reads whole (the
    launcher's failure records are ``<rank>.json``, the hang reports ``<rank>.collective.json``)."""
    try:
        names = os.listdir(errors)
    except OSError:
        return
    for name in names:
        rank = name[: -len(suffix)]
        if not (name.endswith(suffix) and rank.isdigit()):
            continue
        try:
            with open(os.path.join(errors, name), encoding="utf-8") as handle:
                yield int(rank), json.load(handle)
        except (OSError, ValueError):
            continue


def _reports_in(errors: str) -> list[str]:
    try:
        return [name for name in os.listdir(errors) if name.endswith(REPORT_SUFFIX)]
    except OSError:
        return []


# ------------------------------------------------------------------------- the watchdog


class _Watchdog:
    """A daemon thread: reports a collective that outlived the timeout, or a peer's report."""

    def __init__(self, timeout: float, world_size: int) -> None:
        self.timeout = timeout
        self.world_size = world_size
        # a collective raises at the timeout; the thread reports it only if it has not by then
        self.overdue = timeout + min(max(1.0, timeout * 0.1), 30.0)
        self.interval = min(1.0, max(0.05, timeout / 20))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drivetrain-collective-watch", daemon=True)

    def start(self) -> "_Watchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        own = f"{_rank()}{REPORT_SUFFIX}"
        while not self._stop.wait(self.interval) and not _reported:
            now = time.monotonic()
            if any(stack and now - stack[0][_STARTED] > self.overdue for stack in list(_stacks.values())):
                write_report("watchdog")
                continue
            errors = _errors_dir()
            if errors is not None and any(name != own for name in _reports_in(errors)):
                write_report("peer")


_watch: list[_Watchdog | None] = [None]


def start_watch(timeout_seconds: float, world_size: int) -> None:
    """Start this process's watchdog (once; a process of a single-rank run needs none)."""
    if world_size < 2 or _watch[0] is not None:
        return
    _watch[0] = _Watchdog(timeout_seconds, world_size).start()


def stop_watch() -> None:
    if _watch[0] is not None:
        _watch[0].stop()
        _watch[0] = None
