"""Start a job with torch.distributed.run and report a failed rank in one readable summary."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
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


def summarize(error) -> str:
    """One line per failed rank: which rank, how it ended, and its error."""
    lines = [f"drivetrain launch: {len(error.failures)} process(es) failed"]
    for rank, failure in sorted(error.failures.items()):
        message = failure.message
        if isinstance(message, dict):
            message = message.get("message", "")
        message = str(message or "").strip()
        last = [line for line in message.splitlines() if line.strip()]
        reason = last[-1].strip() if last else ""
        if failure.exitcode < 0:
            reason = reason or f"killed by signal {-failure.exitcode}"
        lines.append(f"  rank {rank} (local rank {failure.local_rank}, pid {failure.pid}) exited with code "
                     f"{failure.exitcode}: {reason or 'no error recorded (see its output above)'}")
    return "\n".join(lines)


def launch_torchrun(args: argparse.Namespace) -> int:
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    os.environ.setdefault("DRIVETRAIN_RDZV_ID", str(uuid.uuid4()))
    torch_args = torchrun.get_args_parser().parse_args(torchrun_arguments(args))
    try:
        torchrun.run(torch_args)
    except ChildFailedError as error:
        print(summarize(error), file=sys.stderr)
        return 1
    return 0


def launch_single(args: argparse.Namespace) -> int:
    command = [sys.executable, *_target(args)] if not args.no_python else _target(args)
    result = subprocess.run(command)
    if result.returncode != 0:
        reason = f"killed by signal {-result.returncode}" if result.returncode < 0 else f"exited with code {result.returncode}"
        print(f"drivetrain launch: the process {reason}", file=sys.stderr)
    return 1 if result.returncode < 0 else result.returncode
