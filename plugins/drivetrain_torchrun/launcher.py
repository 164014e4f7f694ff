"""Start a job with torch.distributed.run and report a failed rank in one readable summary."""

from __future__ import annotations

import argparse
import logging
import math
import os
import subprocess
import sys
import tempfile

from drivetrain.plugin_api import CHILD_MODULE as CHILD

DEFAULT_TIMEOUT_S = 1800.0  # torch.distributed's default process group timeout


def _target(args: argparse.Namespace) -> list[str]:
    if args.no_python:
        return [args.training_script, *args.training_script_args]
    return ["-m", CHILD, "--module" if args.module else "--script", args.training_script, *args.training_script_args]


def worker_command(args: argparse.Namespace, unbuffered: bool = True) -> list[str]:
    """What each worker runs, as torchrun runs it: ``python -u`` (output unbuffered) unless
    ``--no-python``. ``unbuffered=False``: plain ``python``, for one process whose output goes
    straight to the terminal, as a script run by hand."""
    if args.no_python:
        return _target(args)
    return [sys.executable, "-u", *_target(args)] if unbuffered else [sys.executable, *_target(args)]


def collective_limit(args: argparse.Namespace) -> float:
    """How long a rank left stopped once the others ended is given before it is killed: the
    run's collective timeout when given at launch (the launcher cannot see one set in the script)."""
    try:
        return float(getattr(args, "timeout", None) or os.environ.get("DRIVETRAIN_TIMEOUT") or DEFAULT_TIMEOUT_S)
    except ValueError:  # a bad variable is the workers' error to report
        return DEFAULT_TIMEOUT_S


def rendezvous_conf(args: argparse.Namespace, timeout_key: str) -> str:
    """``--rdzv-conf`` with ``--rdzv-timeout`` as the rendezvous back-end's ``timeout_key``
    (unless the user's own ``--rdzv-conf`` sets it): torch would wait 10 minutes or more."""
    conf = args.rdzv_conf or ""
    keys = {part.split("=", 1)[0].strip() for part in conf.split(",") if "=" in part}
    seconds = getattr(args, "rdzv_timeout", None)
    if seconds and timeout_key not in keys:
        conf = ",".join(filter(None, [conf, f"{timeout_key}={math.ceil(seconds)}"]))
    return conf


def rendezvous_id() -> str:
    """The job's name in an elastic rendezvous: the same on every machine, and on a machine's
    launcher started again, or they would never meet (``DRIVETRAIN_RDZV_ID``, e.g. the
    scheduler's job id; the rendezvous endpoint already keeps two jobs apart)."""
    return os.environ.get("DRIVETRAIN_RDZV_ID") or "drivetrain"


#: torch's switch between one store for the rendezvous and the workers (its default) and one per round.
SHARED_STORE_VARIABLE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def store_per_round(args: argparse.Namespace) -> bool:
    """Whether the workers of a multi-machine elastic job get a new store in every rendezvous round.

    A machine whose launcher is started again joins a later round than the one the others
    first met in. With the store shared (torch's default), the agent of machine 0 publishes
    the workers' store address in its first round only, and the newcomer waits for it in the
    new round until its rendezvous times out. With a store per round, machine 0 publishes a
    fresh address (a free port) in every round: the restarted job forms its group on it, with
    nothing of the failed attempt's.
    """
    return args.num_machines > 1 and args.rdzv_backend not in (None, "static")


def torchrun_arguments(args: argparse.Namespace) -> list[str]:
    """The ``torchrun`` command line for this job."""
    argv = [
        "--nnodes", str(args.num_machines),
        "--nproc-per-node", str(args.nproc_per_node),
        "--max-restarts", str(args.max_restarts),
        "--monitor-interval", str(args.monitor_interval),
        "--tee", str(args.tee),
        "--role", getattr(args, "role", None) or "default",
    ]
    if args.log_dir:
        argv += ["--log-dir", args.log_dir]
    standalone = args.num_machines == 1 and not args.main_process_port
    conf = rendezvous_conf(args, "timeout" if args.rdzv_backend == "static" else "join_timeout")
    if conf and not standalone:
        argv += ["--rdzv-conf", conf]
    elif args.rdzv_conf:
        argv += ["--rdzv-conf", args.rdzv_conf]
    if standalone:
        argv += ["--standalone"]  # a free local port, chosen by the rendezvous
    elif args.rdzv_backend == "static":
        argv += ["--node-rank", str(args.machine_rank), "--master-addr", args.main_process_ip or "127.0.0.1",
                 "--master-port", str(args.main_process_port or 29500), "--rdzv-backend", "static"]
    else:
        endpoint = f"{args.main_process_ip or '127.0.0.1'}:{args.main_process_port or 29500}"
        argv += ["--rdzv-backend", args.rdzv_backend, "--rdzv-endpoint", endpoint,
                 "--rdzv-id", rendezvous_id()]
    if args.no_python:
        argv += ["--no-python"]
    return argv + preemption_arguments(args) + _target(args)


def preemption_arguments(args: argparse.Namespace) -> list[str]:
    """torchrun's options that make its agent pass SIGUSR1 on as the other signals, and give the
    workers the grace period to save after one (torch releases whose torchrun has them)."""
    from torch.distributed import run as torchrun

    from drivetrain.plugin_api import preemption_grace

    from .signals import FORWARDED

    known = {option for action in torchrun.get_args_parser()._actions for option in action.option_strings}
    argv = []
    if "--signals-to-handle" in known:
        argv += ["--signals-to-handle", ",".join(signum.name for signum in FORWARDED)]
    if "--shutdown-timeout" in known:
        argv += ["--shutdown-timeout", str(math.ceil(preemption_grace(args)))]
    return argv


def rendezvous_failure(args: argparse.Namespace, error: BaseException) -> str:
    """One line for a rendezvous that failed before any worker started."""
    where = f"{args.main_process_ip or '127.0.0.1'}:{args.main_process_port or 29500}"
    detail = " ".join(str(error).split()) or type(error).__name__
    return (f"drivetrain launch: no rendezvous with machine 0 at {where}: {detail}; check that machine 0 is running "
            f"and --main-process-ip/--main-process-port, or wait longer with --rdzv-timeout (now "
            f"{getattr(args, 'rdzv_timeout', None) or 'torch default'} s)")


def summarize(error, errors_dir: str | None = None, exits=None, stopped=None) -> str:
    """One line per failed rank: which rank, how it ended, and its error (the rank at fault first)."""
    from drivetrain.plugin_api import failure_summary, last_stderr_line, recorded_collectives, recorded_failures

    if not errors_dir:
        return failure_summary(error, "drivetrain launch")
    ranks = set(getattr(error, "failures", {}) or {}) | set(exits or {})
    return failure_summary(error, "drivetrain launch", recorded_failures(errors_dir), exits,
                           {rank: last_stderr_line(errors_dir, rank) for rank in ranks}, stopped,
                           recorded_collectives(errors_dir))


def _quiet_agent() -> None:
    """Only errors from torch's launcher and agent: its loggers set their own level, so each is set."""
    import torch.distributed.elastic.agent.server.local_elastic_agent  # noqa: F401  (creates its loggers)
    import torch.distributed.launcher.api  # noqa: F401

    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.ERROR)


class _NoClosingNotes(logging.Filter):
    """The agent notes each worker it stops; the launcher says it once instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not (message.startswith("Sending process") or "death signal" in message)


def stopped(signum: int | None, codes: dict[int, int | None] | None = None) -> int:
    """The launcher's line and exit code after a signal (``None``: one the workers alone got):
    ``PREEMPTED_EXIT_CODE`` when every worker saved a checkpoint and exited with it."""
    import signal

    from drivetrain.plugin_api import PREEMPTED_EXIT_CODE

    try:
        name = signal.Signals(signum).name if signum is not None else "a signal to the workers"
    except ValueError:
        name = f"signal {signum}"
    if codes and all(code == PREEMPTED_EXIT_CODE for code in codes.values()):
        print(f"drivetrain launch: preempted by {name}; every worker saved a checkpoint and exited "
              f"with code {PREEMPTED_EXIT_CODE}", file=sys.stderr)
        return PREEMPTED_EXIT_CODE
    if codes and any(code == PREEMPTED_EXIT_CODE for code in codes.values()):
        saved = sorted(rank for rank, code in codes.items() if code == PREEMPTED_EXIT_CODE)
        print(f"drivetrain launch: stopped by {name}; rank(s) {', '.join(map(str, saved))} saved but not every "
              "worker did (load_state() takes the newest checkpoint complete on every process)", file=sys.stderr)
    else:
        print(f"drivetrain launch: stopped by {name}; every worker was ended", file=sys.stderr)
    return 128 + signum if signum is not None else 1


def _heartbeat(args: argparse.Namespace, started):
    """Launchers of a multi-machine job watch each other through the rendezvous store (see heartbeat)."""
    import contextlib

    from .heartbeat import MachineHeartbeat

    if args.num_machines < 2:
        return contextlib.nullcontext()
    return MachineHeartbeat(args.main_process_ip or "127.0.0.1", int(args.main_process_port or 29500),
                            args.machine_rank, args.num_machines, started)


def _report_lost_machines(heartbeat) -> bool:
    from .heartbeat import MachineHeartbeat, lost_machines_line

    lost = heartbeat.lost() if isinstance(heartbeat, MachineHeartbeat) else []
    if lost:
        print(lost_machines_line(lost), file=sys.stderr)
    return bool(lost)


class _AgentExits(logging.Handler):
    """Hands the watchers the exit code of the worker torch's agent names as failed first: the
    agent may have collected it before the launcher's watcher saw it end."""

    def __init__(self, attempts) -> None:
        super().__init__()
        self.attempts = attempts

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("failed (exitcode") and isinstance(record.args, tuple):
            try:
                code, _local_rank, pid = (int(value) for value in record.args[:3])
            except (TypeError, ValueError):
                return
            self.attempts.note_reaped(pid, code)


def launch_torchrun(args: argparse.Namespace) -> int:
    from torch.distributed import DistError
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.rendezvous import RendezvousError
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from drivetrain.plugin_api import ERRORS_DIR_VARIABLE, PREEMPTED_EXIT_CODE, AttemptWatchers

    if getattr(args, "quiet", None):
        _quiet_agent()
    torch_args = torchrun.get_args_parser().parse_args(torchrun_arguments(args))
    import torch.distributed.elastic.agent.server.api  # noqa: F401  (creates its logger)

    notes = [logging.getLogger(name) for name in ("torch.distributed.elastic.multiprocessing.api",
                                                  "torch.distributed.elastic.agent.server.api")]
    quiet_stop = _NoClosingNotes()
    for logger in notes:
        logger.addFilter(quiet_stop)
    with tempfile.TemporaryDirectory(prefix="drivetrain-errors-") as errors, \
            AttemptWatchers(errors, stopped_limit=collective_limit(args)) as attempts, \
            _heartbeat(args, lambda: bool(attempts.watchers)) as heartbeat:
        os.environ[ERRORS_DIR_VARIABLE] = errors  # each child records the error that ended it, per attempt
        agent_exits = _AgentExits(attempts)
        notes[0].addHandler(agent_exits)
        own_store = store_per_round(args) and SHARED_STORE_VARIABLE not in os.environ
        if own_store:
            os.environ[SHARED_STORE_VARIABLE] = "1"
        try:
            torchrun.run(torch_args)
        except ChildFailedError as error:
            attempts.__exit__()  # every end seen so far; nothing more is coming
            codes = {rank: failure.exitcode for rank, failure in error.failures.items()}
            if all(code == PREEMPTED_EXIT_CODE for code in codes.values()):  # saved on a signal to the workers
                return stopped(None, codes)
            _report_lost_machines(heartbeat)
            print(attempts.report(error) or summarize(error), file=sys.stderr)
            return 1
        except (DistError, RendezvousError) as error:  # machine 0 unreachable, or the wait expired
            if not _report_lost_machines(heartbeat):
                print(rendezvous_failure(args, error), file=sys.stderr)
            return 1
        except SignalException as stop:  # Ctrl-C or SIGTERM: torch's agent has ended the workers
            attempts.__exit__()  # every end seen so far
            latest = attempts.watchers[max(attempts.watchers)] if attempts.watchers else None
            codes = {rank: code for rank, (_when, code) in getattr(latest, "exits", {}).items()}
            return stopped(int(stop.sigval), codes)
        finally:
            os.environ.pop(ERRORS_DIR_VARIABLE, None)
            if own_store:
                os.environ.pop(SHARED_STORE_VARIABLE, None)
            notes[0].removeHandler(agent_exits)
            for logger in notes:
                logger.removeFilter(quiet_stop)
        report_recovery(attempts)
    return 0


def report_recovery(attempts) -> None:
    """After a job that succeeded: one line on the attempts that failed before, if any."""
    attempts.__exit__()
    earlier = attempts.report()
    if not earlier:
        return
    last = max(attempts.watchers)
    if last in attempts.failed_attempts():
        # torch's agent starts the workers again without counting a restart when a machine
        # joins, so the workers that succeeded share the failed attempt's number
        outcome = "the workers started again when a machine rejoined succeeded"
    else:
        outcome = f"attempt {last + 1} succeeded"
    print(earlier.splitlines()[0] + f"; {outcome}", file=sys.stderr)


def launch_single(args: argparse.Namespace) -> int:
    import threading

    from drivetrain.plugin_api import (ERRORS_DIR_VARIABLE, describe_exit, last_stderr_line, preemption_grace,
                                       recorded_failures)

    from .signals import Signals

    command = worker_command(args, unbuffered=False)
    with tempfile.TemporaryDirectory(prefix="drivetrain-errors-") as errors:
        child = subprocess.Popen(command, env={**os.environ, ERRORS_DIR_VARIABLE: errors})
        # the child ends as the launcher was asked to: it gets the grace period to save, none
        # after a second signal
        bound = threading.Timer(preemption_grace(args), child.kill)

        def forward(signum: int) -> None:
            child.send_signal(signum)
            if not bound.is_alive():
                bound.start()

        with Signals(forward=forward) as signals:
            signals.on_repeat = child.kill
            code = child.wait()
        bound.cancel()
        recorded = recorded_failures(errors)
        last = last_stderr_line(errors, 0)
    if signals.received:
        return stopped(signals.received[0], {0: code})
    if code != 0:
        error = next(iter(recorded.values()), (0, ""))[1] or last
        print(f"drivetrain launch: the process {describe_exit(code)}" + (f": {error}" if error else ""),
              file=sys.stderr)
    return 1 if code < 0 else code
