"""``drivetrain launch --mpirun-hostfile FILE``: CPU processes on several machines through mpirun.

The launcher builds one ``mpirun`` command; MPI starts every process, and each finds its rank
in the variables its MPI sets (this plugin's cluster environment). Intel MPI / MPICH and Open
MPI spell the options differently; ``mpirun --version`` tells which one is installed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from drivetrain.plugin_api import CHILD_MODULE as CHILD
from drivetrain.plugin_api import LaunchError, find_executable, program_version

# Variables every process needs: the run's choice and the rendezvous address.
_EXPORTED_PREFIXES = ("DRIVETRAIN_", "ACCELERATE_")
_EXPORTED = ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS")


def mpi_flavour(mpirun: str = "mpirun") -> str:
    """``"openmpi"`` or ``"mpich"`` (Intel MPI and MPICH share their options)."""
    if find_executable(mpirun) is None:
        raise LaunchError(f"--mpirun-hostfile needs {mpirun!r} on PATH; install an MPI (Open MPI, MPICH or "
                          "Intel MPI) or launch without --mpirun-hostfile")
    text = program_version(mpirun)
    return "openmpi" if "Open MPI" in text or "OpenRTE" in text else "mpich"


def _placement(args: argparse.Namespace, flavour: str) -> list[str]:
    per_node = str(args.num_processes // args.num_machines)
    if flavour == "openmpi":
        return ["mpirun", "--hostfile", args.mpirun_hostfile, "--map-by", f"ppr:{per_node}:node",
                "-np", str(args.num_processes), "--bind-to", "none"]
    return ["mpirun", "-f", args.mpirun_hostfile, "-ppn", per_node, "-n", str(args.num_processes)]


def _exported(env: dict[str, str] | os._Environ) -> list[str]:
    return sorted(key for key in env if key.startswith(_EXPORTED_PREFIXES) or key in _EXPORTED)


def mpirun_prefix(args: argparse.Namespace, env: dict[str, str]) -> list[str]:
    """``mpirun`` and its placement options, before a process's command line. MPICH and Intel MPI
    pass the whole environment on; Open MPI passes the variables ``-x`` names."""
    flavour = mpi_flavour()
    command = _placement(args, flavour)
    if flavour == "openmpi":
        for key in _exported(env):
            command += ["-x", key]
    return command


def mpirun_command(args: argparse.Namespace, flavour: str, env: dict[str, str] | None = None) -> list[str]:
    """The ``mpirun`` command line for this job (the variables in ``env`` exported to it)."""
    env = os.environ if env is None else env
    command = _placement(args, flavour)
    if flavour == "openmpi":
        exported = lambda key, value: ["-x", f"{key}={value}"]  # noqa: E731
    else:
        exported = lambda key, value: ["-genv", key, value]  # noqa: E731
    variables = {key: env[key] for key in _exported(env)}
    variables.setdefault("MASTER_ADDR", args.main_process_ip or "127.0.0.1")
    variables.setdefault("MASTER_PORT", str(args.main_process_port or 29500))
    for key in sorted(variables):
        command += exported(key, variables[key])
    if args.no_python:
        return command + [args.training_script, *args.training_script_args]
    return command + [sys.executable, "-m", CHILD, "--module" if args.module else "--script",
                      args.training_script, *args.training_script_args]


def launch_mpirun(args: argparse.Namespace) -> int:
    if not os.path.isfile(args.mpirun_hostfile):
        raise LaunchError(f"--mpirun-hostfile {args.mpirun_hostfile!r} names no file")
    return subprocess.run(mpirun_command(args, mpi_flavour())).returncode
