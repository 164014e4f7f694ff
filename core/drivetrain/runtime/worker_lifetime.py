"""Workers end with their launcher, even when it is killed with SIGKILL (Linux).

A launcher killed outright runs no clean-up, and its workers would go on for as long as
their script runs, holding devices and ports. So each worker, first thing at start-up:

- asks the kernel for SIGKILL when its parent ends (``prctl(PR_SET_PDEATHSIG)``), then
  checks that its parent is still the one it had before asking (the parent may have ended
  in between, and the signal would then never come);
- when the launcher is not its parent but a further ancestor (a launcher of another
  library in between), watches the launcher itself: a thread waits on
  a pidfd of it, and ends the worker when it ends. The intermediate launchers see their
  workers end and end too.

The launcher is named by ``DRIVETRAIN_LAUNCHER`` as ``pid:start time``: the start time tells
the launcher from a process that got its pid later, or has the same pid on another machine
(the variable travels to remote workers with the rest of the environment).
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import signal
import sys
import threading
import time

logger = logging.getLogger("drivetrain.worker_lifetime")  # its name before the layers, kept for log filters

LAUNCHER_VARIABLE = "DRIVETRAIN_LAUNCHER"
_PR_SET_PDEATHSIG = 1


def stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` from its third field on (the name, which may hold spaces, left out)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def _start_time(pid: int) -> str | None:
    fields = stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


def launcher_identity(pid: int | None = None) -> str:
    """This process (or ``pid``) as the workers will recognise it: ``pid:start time``."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{_start_time(pid) or ''}"


def _ancestors() -> list[tuple[int, str | None]]:
    """This process's ancestors with their start times, parent first."""
    found, pid = [], os.getppid()
    while pid > 1 and len(found) < 64:
        fields = stat_fields(pid)
        if fields is None:
            break
        found.append((pid, fields[19] if len(fields) > 19 else None))
        pid = int(fields[1])
    return found


def _end_now() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _watch(pid: int, start: str) -> None:
    """End this process when the launcher ``pid`` ends (a pidfd, polled once a second without one)."""
    try:
        descriptor = os.pidfd_open(pid)
    except (AttributeError, OSError):
        descriptor = None
    if _start_time(pid) != start:  # it ended before the pidfd was opened
        _end_now()

    def wait() -> None:
        if descriptor is not None:
            select.select([descriptor], [], [])
        else:
            while _start_time(pid) == start:
                time.sleep(1.0)
        _end_now()

    threading.Thread(target=wait, name="drivetrain-launcher-watch", daemon=True).start()


def die_with_launcher(environ: dict[str, str] | None = None) -> None:
    """In a worker, at start-up: end when the parent or the launcher ends (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            logger.debug("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    except (OSError, AttributeError) as error:
        logger.debug("prctl is not available: %s", error)
    if os.getppid() != parent:  # the parent ended before the signal was armed: it will never come
        _end_now()
    pid_text, _, start = (environ if environ is not None else os.environ).get(LAUNCHER_VARIABLE, "").partition(":")
    if not pid_text.isdigit() or int(pid_text) == parent:
        return  # no launcher named, or it is the parent: the death signal covers it
    launcher = int(pid_text)
    if (launcher, start) in _ancestors():  # on another machine, or not above this process: not ours to watch
        _watch(launcher, start)
