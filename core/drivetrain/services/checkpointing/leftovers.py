"""What a save stopped by a signal leaves behind, and how the next save or load removes it.

``save_state`` writes into a hidden ``.tmp-*`` directory renamed into place at the end (see
``commit.py``). A process stopped in between (SIGTERM, SIGKILL, Ctrl-C, a crash) leaves that
directory: the previous checkpoint is intact, but the folder stays and can be large.

The process that creates the directory records itself in it (``WRITER``: host, pid, the
process's start time and pid namespace). The next save beside it, or a load of a checkpoint
there, removes each temporary directory whose writer is gone: on this host and pid
namespace, a pid no longer running, or running but started at another time (a reused pid).
A writer on another machine cannot be asked; its directory goes only once untouched for an
hour (``layout.remove_stale_temporaries``). A Ctrl-C during the save removes the directory
at once (``remove_on_interrupt``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
from pathlib import Path
from typing import Any, Iterator

from . import layout

logger = logging.getLogger("drivetrain.checkpointing.leftovers")

# Starts with the temporary prefix: skipped as save_state's own when the checkpoint's files are listed.
WRITER = f"{layout.TEMP_PREFIX}writer.json"


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _started(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def record_writer(temporary: Path) -> None:
    """Record this process as the writer of ``temporary`` (best effort: without it, only age counts)."""
    record = {"host": socket.gethostname(), "pid": os.getpid(), "started": _started(os.getpid()),
              "pid_namespace": _pid_namespace()}
    try:
        (temporary / WRITER).write_text(json.dumps(record), encoding="utf-8")
    except OSError as error:
        logger.debug("could not record the writer of %s: %s", temporary, error)


def forget_writer(temporary: Path) -> None:
    """Remove the record before ``temporary`` becomes the checkpoint."""
    (temporary / WRITER).unlink(missing_ok=True)


def writer_is_gone(record: Any) -> bool:
    """Whether the process ``record`` names has certainly ended (``False`` when it cannot be told)."""
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
        return False
    if record.get("host") != socket.gethostname() or record.get("pid_namespace") != _pid_namespace():
        return False  # another machine or container: its processes are not visible here
    import psutil

    pid = record["pid"]
    if not psutil.pid_exists(pid):
        return True
    started = record.get("started")
    now_started = _started(pid)
    return started is not None and now_started is not None and abs(now_started - started) > 1.0


def _abandoned_in(directory: Path) -> Iterator[Path]:
    try:
        children = list(directory.iterdir())
    except OSError:
        return
    for child in children:
        if not child.name.startswith(layout.TEMP_PREFIX) or child.is_symlink() or not child.is_dir():
            continue
        try:
            record = json.loads((child / WRITER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # no record (an older drivetrain, another tool): only age removes it
        if writer_is_gone(record):
            yield child


def remove_abandoned(*directories: Path) -> list[Path]:
    """Remove the temporary directories of writers that are gone, directly inside ``directories``."""
    removed = []
    for directory in directories:
        for leftover in _abandoned_in(directory):
            shutil.rmtree(leftover, ignore_errors=True)
            if not leftover.exists():
                logger.info("removed %s, left by a save that was stopped", leftover)
                removed.append(leftover)
    return removed


def around(path: Path) -> tuple[Path, ...]:
    """Where temporary directories of saves into or beside ``path`` lie: its parent, and ``path`` itself."""
    return (path.parent, path) if path.is_dir() and not path.is_symlink() else (path.parent,)


@contextlib.contextmanager
def remove_on_interrupt(temporary: Path, owner: bool) -> Iterator[None]:
    """Remove ``temporary`` (on its ``owner``) when the block is interrupted (Ctrl-C, ``SystemExit``)."""
    try:
        yield
    except (KeyboardInterrupt, SystemExit):
        if owner:
            shutil.rmtree(temporary, ignore_errors=True)
        raise
