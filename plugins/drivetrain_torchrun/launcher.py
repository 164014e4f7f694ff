"""Start a job with torch.distributed.run and report a failed rank in one readable summary."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import uuid

CHILD = "drivetrain.cli.child"


def _target(args: argparse.Namespace) -> list[str]:
    if args.no_python:
        return [args.training_script, *args.training_script_args]
    return ["-m", CHILD, "--module" if args.module else "--script", args.training_script, *args.training_script_args]


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
    if args.rdzv_conf:
        argv += ["--rdzv-conf", args.rdzv_conf]
    if args.num_machines == 1 and not args.main_process_port:
        argv += ["--standalone"]  # a free local port, chosen by the rendezvous
    elif args.rdzv_backend == "static":
        argv += ["--node-rank", str(args.machine_rank), "--master-addr", args.main_process_ip or "127.0.0.1",
                 "--master-port", str(args.main_process_port or 29500), "--rdzv-backend", "static"]
    else:
        endpoint = f"{args.main_process_ip or '127.0.0.1'}:{args.main_process_port or 29500}"
        argv += ["--rdzv-backend", args.rdzv_backend, "--rdzv-endpoint", endpoint,
                 "--rdzv-id", os.environ.get("DRIVETRAIN_RDZV_ID", "drivetrain")]
    if args.no_python:
        argv += ["--no-python"]
    return argv + _target(args)


def summarize(error, errors_dir: str | None = None) -> str:
    """One line per failed rank: which rank, how it ended, and its error (first failure first)."""
    from drivetrain.launchers import failure_summary, recorded_failures

    return failure_summary(error, "drivetrain launch", recorded_failures(errors_dir) if errors_dir else None)


def _quiet_agent() -> None:
    """Only errors from torch's launcher and agent: its loggers set their own level, so each is set."""
    import torch.distributed.elastic.agent.server.local_elastic_agent  # noqa: F401  (creates its loggers)
    import torch.distributed.launcher.api  # noqa: F401

    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.ERROR)


def launch_torchrun(args: argparse.Namespace) -> int:
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from drivetrain.launchers import ERRORS_DIR_VARIABLE

    os.environ.setdefault("DRIVETRAIN_RDZV_ID", str(uuid.uuid4()))
    if getattr(args, "quiet", None):
        _quiet_agent()
    torch_args = torchrun.get_args_parser().parse_args(torchrun_arguments(args))
    with tempfile.TemporaryDirectory(prefix="drivetrain-errors-") as errors:
        os.environ[ERRORS_DIR_VARIABLE] = errors  # each child records the error that ended it
        try:
            torchrun.run(torch_args)
        except ChildFailedError as error:
            print(summarize(error, errors), file=sys.stderr)
            return 1
        finally:
            os.environ.pop(ERRORS_DIR_VARIABLE, None)
    return 0


def launch_single(args: argparse.Namespace) -> int:
    from drivetrain.launchers import ERRORS_DIR_VARIABLE, recorded_failures

    command = [sys.executable, *_target(args)] if not args.no_python else _target(args)
    with tempfile.TemporaryDirectory(prefix="drivetrain-errors-") as errors:
        result = subprocess.run(command, env={**os.environ, ERRORS_DIR_VARIABLE: errors})
        recorded = recorded_failures(errors)
    if result.returncode != 0:
        reason = f"killed by signal {-result.returncode}" if result.returncode < 0 else f"exited with code {result.returncode}"
        error = next(iter(recorded.values()), (0, ""))[1]
        print(f"drivetrain launch: the process {reason}" + (f": {error}" if error else ""), file=sys.stderr)
    return 1 if result.returncode < 0 else result.returncode
