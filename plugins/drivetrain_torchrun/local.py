"""One machine's job, started without torch's elastic agent.

On one machine the agent has no one to agree with, yet it imports torch before it starts a
worker: 1.5–3 s of every launch spent before the first worker runs, and more at exit. This
launcher plays the agent's part itself and never imports torch:

- each worker gets the environment torch's agent gives it (ranks and sizes, ``MASTER_ADDR``
  and ``MASTER_PORT``, ``TORCHELASTIC_*``, ``OMP_NUM_THREADS=1`` unless set), runs as
  ``python -u`` in a session of its own, and sees the same job either way;
- the port is one the launcher keeps bound, without listening, until the attempt ends: rank
  0's store can bind it too (both ask for address reuse), no other program can take it first;
- the first worker that fails ends the attempt: the others get SIGTERM, then SIGKILL after
  the agent's grace period; ``--max-restarts`` starts every worker again, with the next
  ``TORCHELASTIC_RESTART_COUNT`` and a fresh port;
- SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGUSR1 are passed to every worker, which get
  ``--preemption-grace`` seconds to end (a run with ``save_on_preemption`` saves a checkpoint
  and exits with ``PREEMPTED_EXIT_CODE``) before SIGKILL, or none on a second signal; the
  launcher exits with that code when every worker saved, else with 128 + the signal. One the
  launcher was started ignoring (``nohup``) stays ignored.

What needs the agent (several machines, an elastic rendezvous, ``--tee``, ``--log-dir``)
goes through :func:`drivetrain_torchrun.launcher.launch_torchrun`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Iterator

from drivetrain.plugin_api import ERRORS_DIR_VARIABLE, PREEMPTED_EXIT_CODE, preemption_grace

from .launcher import collective_limit, report_recovery, rendezvous_id, summarize, stopped, worker_command
from .signals import Signals

GRACE_S = 30.0  # how long torch's agent lets a worker end after SIGTERM before SIGKILL


@dataclass
class WorkerFailure:
    """A failed worker as torch's ``ProcessFailure`` describes one to the summary."""

    local_rank: int
    pid: int
    exitcode: int
    timestamp: float
    message: str = ""


class WorkersFailed(Exception):
    """The last attempt failed; ``failures`` maps each failed rank to its :class:`WorkerFailure`."""

    def __init__(self, failures: dict[int, WorkerFailure]) -> None:
        super().__init__(", ".join(f"rank {rank} exited with {f.exitcode}" for rank, f in sorted(failures.items())))
        self.failures = failures


class Stopped(Exception):
    """The launcher was sent a signal (``signum``; ``None``: only the workers were, and saved),
    and every worker has ended; ``codes`` maps each rank to its exit code."""

    def __init__(self, signum: int | None, codes: dict[int, int | None]) -> None:
        super().__init__(signum)
        self.signum, self.codes = signum, codes


@contextlib.contextmanager
def reserved_port(args: argparse.Namespace) -> Iterator[int]:
    """The port of rank 0's store: the one given, or a free one held until the attempt ends."""
    if args.main_process_port:
        yield int(args.main_process_port)
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        yield holder.getsockname()[1]


def worker_environment(args: argparse.Namespace, rank: int, attempt: int, port: int) -> dict[str, str]:
    """What torch's agent sets for worker ``rank`` of a one-machine job, over this environment."""
    size = str(args.num_processes)
    env = dict(os.environ)
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
        "ROLE_NAME": getattr(args, "role", None) or "default",
        "LOCAL_WORLD_SIZE": size, "WORLD_SIZE": size, "GROUP_WORLD_SIZE": "1", "ROLE_WORLD_SIZE": size,
        "MASTER_ADDR": args.main_process_ip or "127.0.0.1", "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": str(attempt), "TORCHELASTIC_MAX_RESTARTS": str(args.max_restarts),
        "TORCHELASTIC_RUN_ID": rendezvous_id(), "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    })
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default for several processes
    return env


class LocalAttempt:
    """The workers of one attempt: started, watched until they end, ended together."""

    def __init__(self, args: argparse.Namespace, attempt: int, watchers, signals: Signals) -> None:
        self.args, self.attempt, self.watchers, self.signals = args, attempt, watchers, signals
        self.workers: dict[int, subprocess.Popen] = {}
        self._told: set[int] = set()

    def run(self) -> dict[int, WorkerFailure]:
        """The failed ranks of this attempt (none when every worker succeeded).

        Raises:
            Stopped: the launcher was sent a signal.
        """
        with reserved_port(self.args) as port:
            try:
                for rank in range(self.args.num_processes):
                    env = worker_environment(self.args, rank, self.attempt, port)
                    env[ERRORS_DIR_VARIABLE] = self.watchers.errors  # where it records the error that ends it
                    self.workers[rank] = subprocess.Popen(worker_command(self.args), env=env, start_new_session=True)
                return self._watch()
            finally:
                self.end(signal.SIGTERM)

    def _watch(self) -> dict[int, WorkerFailure]:
        while True:
            if self.signals.received:
                # passed on: the workers may save a checkpoint first, for up to the grace period
                signum = self.signals.received[0]
                self.end(signum, preemption_grace(self.args))
                raise Stopped(signum, self._codes())
            failed = self._failures()
            if failed and all(failure.exitcode == PREEMPTED_EXIT_CODE for failure in failed.values()):
                # a worker saved on a signal sent to the workers only: the others are saving too
                self.end(None, preemption_grace(self.args))
                raise Stopped(None, self._codes())
            if failed:
                # as torch's agent does: the others are ended, and those that end badly count too
                self.end(signal.SIGTERM)
                return {**self._failures(), **failed}
            if all(worker.returncode == 0 for worker in self.workers.values()):
                return {}
            self.signals.wait(self.args.monitor_interval)

    def _failures(self) -> dict[int, WorkerFailure]:
        """The ranks that have ended badly so far (each end also told to the exit watchers)."""
        now, failed = time.time(), {}
        for rank, worker in self.workers.items():
            code = worker.poll()
            if code is not None and rank not in self._told:  # polling collected it: the watcher may not have seen it
                self._told.add(rank)
                self.watchers.note_reaped(worker.pid, code)
            if code not in (None, 0):
                failed[rank] = WorkerFailure(rank, worker.pid, code, now)
        return failed

    def _codes(self) -> dict[int, int | None]:
        return {rank: worker.poll() for rank, worker in self.workers.items()}

    def end(self, signum: int | None, grace: float = GRACE_S) -> None:
        """Every worker still running gets ``signum`` (its whole session; ``None``: nothing,
        it is ending already), then SIGKILL after ``grace`` seconds, or at once on a second
        signal to the launcher."""
        running = [worker for worker in self.workers.values() if worker.poll() is None]
        if signum is not None:
            for worker in running:
                _signal_session(worker.pid, signum)
        self.signals.on_repeat = self.kill
        deadline = time.monotonic() + grace
        for worker in running:
            try:
                worker.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_session(worker.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.wait(GRACE_S)

    def kill(self) -> None:
        """SIGKILL to every worker still running (a second signal to the launcher)."""
        for worker in self.workers.values():
            if worker.poll() is None:
                _signal_session(worker.pid, signal.SIGKILL)


def _signal_session(pid: int, signum: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signum)


def launch_local(args: argparse.Namespace) -> int:
    from drivetrain.plugin_api import AttemptWatchers

    with tempfile.TemporaryDirectory(prefix="drivetrain-errors-") as errors, \
            AttemptWatchers(errors, stopped_limit=collective_limit(args)) as attempts, Signals() as signals:
        try:
            for attempt in range(args.max_restarts + 1):
                failures = LocalAttempt(args, attempt, attempts, signals).run()
                if not failures:
                    break
            else:
                error = WorkersFailed(failures)
                attempts.__exit__()  # every end seen so far; nothing more is coming
                print(attempts.report(error) or summarize(error), file=sys.stderr)
                return 1
        except Stopped as stop:
            return stopped(stop.signum, stop.codes)
        except OSError as error:  # the interpreter or --no-python's executable cannot be started
            print(f"drivetrain launch: cannot start the workers: {error}", file=sys.stderr)
            return 1
        report_recovery(attempts)
    return 0
