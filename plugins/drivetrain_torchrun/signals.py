"""The signals a launcher passes on to its workers, caught while the job runs."""

from __future__ import annotations

import signal
import threading
from typing import Callable

# SIGUSR1 too: SLURM's ``--signal`` sends it before the end of a job's time (a launcher that
# died of it would take its workers along before they could save a checkpoint)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)


class Signals:
    """Catches the forwarded signals while the job runs: each is kept, handed to ``forward``
    at once when given (a launcher blocked waiting on one process), and wakes :meth:`wait`
    (a launcher's monitoring loop). A signal after the first calls ``on_repeat`` when set (the
    launcher waiting for its workers to save: the user wants them ended at once).

    A signal the launcher was started ignoring (``nohup`` ignores SIGHUP) stays ignored: the
    workers inherit that, so a launcher that caught it and passed it on would then wait for
    workers that never end, and a job put under ``nohup`` would not outlive its terminal."""

    def __init__(self, forward: Callable[[int], object] | None = None) -> None:
        self.received: list[int] = []
        self._forward = forward
        self._event = threading.Event()
        self._previous: dict[int, object] = {}
        self.on_repeat: Callable[[], object] | None = None

    def __enter__(self) -> "Signals":
        if threading.current_thread() is threading.main_thread():  # only there can Python catch them
            for signum in FORWARDED:
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._catch)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _catch(self, signum: int, _frame: object) -> None:
        self.received.append(signum)
        if len(self.received) > 1 and self.on_repeat is not None:
            self.on_repeat()
        if self._forward is not None:
            self._forward(signum)
        self._event.set()

    def wait(self, seconds: float) -> None:
        self._event.wait(seconds)
