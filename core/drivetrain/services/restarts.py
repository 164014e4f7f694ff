"""What each attempt of a restarted job did, kept apart from the others.

torch's elastic agent restarts every worker after a failure (``--max-restarts``) and tells
each worker its attempt in ``TORCHELASTIC_RESTART_COUNT``. A worker keeps its records (pid,
last stderr line, the error it raised) in ``<errors>/attempt<N>/``, so the report of attempt 2
never borrows attempt 1's exit code, and the launcher watches each attempt's processes on
their own (:class:`AttemptWatchers`).
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any, Mapping

from ..runtime.process_exits import ExitWatcher, last_stderr_line
from .hang_report import recorded_collectives
from .launchers import failure_summary, recorded_failures

#: Set by torch's elastic agent in every worker: 0 for the first attempt, then 1, 2, ...
RESTART_COUNT_VARIABLE = "TORCHELASTIC_RESTART_COUNT"
_ATTEMPT_DIR = re.compile(r"^attempt(\d+)$")


def attempt_errors_dir(base: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """In a worker: the folder of this attempt's records under ``base`` (created), or ``None``."""
    if not base:
        return None
    environ = os.environ if environ is None else environ
    attempt = int(environ.get(RESTART_COUNT_VARIABLE) or 0)
    path = os.path.join(base, f"attempt{attempt}")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:  # reporting must never stop the worker
        return base
    return path


class AttemptWatchers:
    """One :class:`ExitWatcher` per attempt folder that appears under ``errors``."""

    def __init__(self, errors: str, stopped_limit: float | None = None, interval: float = 0.005) -> None:
        self.errors = errors
        self.stopped_limit = stopped_limit
        self.interval = interval
        self.watchers: dict[int, ExitWatcher] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._discover, name="drivetrain-attempt-watcher", daemon=True)

    def __enter__(self) -> "AttemptWatchers":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1)
        self._scan()  # an attempt that began just before the end
        for watcher in list(self.watchers.values()):
            watcher.__exit__()

    def _scan(self) -> None:
        try:
            names = os.listdir(self.errors)
        except OSError:
            return
        for name in names:
            found = _ATTEMPT_DIR.match(name)
            if found and int(found.group(1)) not in self.watchers:
                watcher = ExitWatcher(os.path.join(self.errors, name), self.interval, self.stopped_limit)
                self.watchers[int(found.group(1))] = watcher.__enter__()

    def _discover(self) -> None:
        while not self._stop.is_set():
            self._scan()
            self._stop.wait(0.05)

    def note_reaped(self, pid: int, code: int) -> None:
        """:meth:`ExitWatcher.note_reaped` for whichever attempt ``pid`` belonged to."""
        for watcher in list(self.watchers.values()):
            watcher.note_reaped(pid, code)

    def failed_attempts(self) -> list[int]:
        """Attempts (from 0) in which a rank raised or ended with a non-zero code."""
        failed = []
        for attempt in sorted(self.watchers):
            watcher = self.watchers[attempt]
            codes = [code for _at, code in watcher.exits.values()]
            if any(code not in (0, None) for code in codes) or recorded_failures(watcher.errors) or watcher.stopped:
                failed.append(attempt)
        return failed

    def summary(self, attempt: int, error: Any = None, title: str = "drivetrain launch") -> str:
        """:func:`failure_summary` of one attempt (``error``: torch's ``ChildFailedError`` of it, if any)."""
        watcher = self.watchers[attempt]
        ranks = set(getattr(error, "failures", {}) or {}) | set(watcher.exits)
        return failure_summary(error if error is not None else _NoFailures(), title,
                               recorded_failures(watcher.errors), watcher.exits,
                               {rank: last_stderr_line(watcher.errors, rank) for rank in ranks}, watcher.stopped,
                               recorded_collectives(watcher.errors))

    def report(self, final_error: Any = None, title: str = "drivetrain launch") -> str:
        """Every failed attempt, one line each first ("attempt 1: rank 1 exited with code 17; ..."),
        then each one's rank-by-rank summary. ``final_error`` belongs to the last attempt."""
        failed = self.failed_attempts()
        last = max(self.watchers) if self.watchers else None
        if final_error is not None and last is not None and last not in failed:
            failed.append(last)
        if not failed:
            return ""
        if len(self.watchers) == 1:  # no restart: the summary as a job without restarts has it
            return self.summary(failed[0], final_error, title)
        details, heads = [], []
        for attempt in failed:
            text = self.summary(attempt, final_error if attempt == last else None, f"attempt {attempt + 1}")
            lines = text.splitlines()
            heads.append(f"attempt {attempt + 1}: {_culprit(lines)}")
            details.append(text)
        return "\n".join([f"{title}: " + "; ".join(heads), *details])


class _NoFailures:
    failures: dict = {}

    def __str__(self) -> str:
        return "no process failed"


def _culprit(lines: list[str]) -> str:
    """``rank 1 exited with code 17`` from a summary's first rank line (its error cut short)."""
    if len(lines) < 2:
        return lines[0].split(": ", 1)[-1] if lines else "failed"
    line = re.sub(r"\(local rank \d+, pid \d+\) ", "", lines[1].strip())
    how, _sep, reason = line.partition(": ")
    if reason and not reason.startswith(("no error recorded", "stopped by the launcher", "did not answer")):
        how += ": " + (reason if len(reason) <= 120 else reason[:117] + "...")
    return how
