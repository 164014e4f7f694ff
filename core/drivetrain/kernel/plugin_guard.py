"""Runs third-party plugin code that discovery needs (imports, registration hooks, probes)
on one worker thread, with a time limit.

An import that sleeps or a probe that never returns must not hang every program, and a
Python thread cannot be stopped: a call that has not answered in time is abandoned on its
worker (a daemon thread, so the process can still exit), the plugin is skipped, and a fresh
worker serves the next call; nothing the abandoned call produces is ever used. One worker
serves every call in turn, so a run pays one thread start, and only when a third-party
plugin is installed (built-in plugins are called directly).

The separate thread also tells a plugin's own faults apart from the user's:

* Python delivers signals to the main thread only, so a ``KeyboardInterrupt`` raised on the
  worker comes from the plugin's code and is recorded as its failure, while a real Ctrl-C
  still stops the program in the main thread that is waiting.
* ``os._exit`` is replaced by a function that, on the worker, raises instead of ending the
  process (and elsewhere exits as before), so a plugin calling it at import is recorded as
  broken instead of ending ``drivetrain launch`` with status 0 having run nothing.
"""

from __future__ import annotations

import _thread
import os
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    import queue

TIMEOUT_VARIABLE = "DRIVETRAIN_PLUGIN_TIMEOUT"
#: Seconds a third-party import, registration hook or probe may take (0: no limit).
DEFAULT_TIMEOUT = 10.0


class PluginCodeFailed(Exception):
    """Plugin code run by :func:`call` raised, called ``os._exit`` or did not answer in time.

    ``reason`` says which, in words; ``error`` is what the plugin raised (``None`` when it
    did not answer).
    """

    def __init__(self, reason: str, error: BaseException | None = None, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error
        self.timed_out = timed_out


class _ExitCalled(BaseException):
    """Raised on the worker instead of ending the process; a ``BaseException`` so that a
    plugin's ``except Exception`` cannot swallow it."""

    def __init__(self, code: Any) -> None:
        super().__init__(code)
        self.code = code


# threading and queue are imported with the first third-party plugin's call: a run with the
# built-in plugins alone never starts the worker, and the import was a part of every start
_local = _thread._local()
_real_exit = os._exit


def _guarded_exit(code: int) -> None:
    if getattr(_local, "guarded", False):
        raise _ExitCalled(code)
    _real_exit(code)


class _Task:
    __slots__ = ("function", "done", "value", "error")

    def __init__(self, function: Callable[[], Any]) -> None:
        import threading

        self.function = function
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.function()
        except BaseException as exc:  # the plugin's fault, whatever it is (see the module's docstring)
            self.error = exc
        finally:
            self.done.set()


def _serve(tasks: queue.SimpleQueue) -> None:
    _local.guarded = True
    while True:
        tasks.get().run()


_lock = _thread.allocate_lock()
_tasks: queue.SimpleQueue | None = None


def _worker() -> queue.SimpleQueue:
    global _tasks
    with _lock:
        if _tasks is None:
            import queue
            import threading

            os._exit = _guarded_exit  # type: ignore[assignment]  # once, for the process's lifetime
            _tasks = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(_tasks,), name="drivetrain-plugin-worker", daemon=True).start()
        return _tasks


def _abandon(tasks: queue.SimpleQueue) -> None:
    global _tasks
    with _lock:
        if _tasks is tasks:
            _tasks = None


def call(function: Callable[[], Any], timeout: float | None) -> Any:
    """``function()`` run on the worker, waiting at most ``timeout`` seconds (``None``: no limit).

    Raises:
        PluginCodeFailed: it raised anything (``KeyboardInterrupt`` and ``SystemExit``
            included), called ``os._exit``, or had not returned in time.
    """
    tasks = _worker()
    task = _Task(function)
    tasks.put(task)
    if not task.done.wait(timeout):  # a real Ctrl-C interrupts this wait and stops the program
        _abandon(tasks)
        raise PluginCodeFailed(f"did not answer within {timeout:g} s (raise the limit with {TIMEOUT_VARIABLE}=SECONDS, "
                               "0 for none)", timed_out=True)
    error = task.error
    if error is None:
        return task.value
    if isinstance(error, _ExitCalled):
        raise PluginCodeFailed(f"called os._exit({error.code!r})")
    raise PluginCodeFailed(f"{type(error).__name__}: {error}", error) from error


def timeout_from(env: Mapping[str, str]) -> tuple[float | None, str | None]:
    """The limit ``DRIVETRAIN_PLUGIN_TIMEOUT`` sets (``None``: no limit), and a warning when
    its value is not a number of seconds (the default applies then)."""
    text = env.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_TIMEOUT, None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also refuses nan
        return DEFAULT_TIMEOUT, (f"{TIMEOUT_VARIABLE}={text!r} is not a number of seconds (0 for no limit); "
                                 f"using {DEFAULT_TIMEOUT:g}")
    return (None if seconds in (0.0, float("inf")) else seconds), None
