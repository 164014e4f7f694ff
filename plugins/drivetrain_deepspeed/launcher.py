"""``drivetrain launch`` through DeepSpeed's own launcher (``deepspeed.launcher.runner``).

Used when the run's strategy is DeepSpeed and the job asks for DeepSpeed's multi-node
launcher: several machines with ``deepspeed_multinode_launcher`` other than ``standard``
(``pdsh``, the default, ``openmpi``, ``mvapich``, ``mpich``, ``impi``, ``slurm``, or ``nossh``),
or an explicit ``deepspeed_hostfile``. ``standard`` (and every other DeepSpeed job) is
launched by torchrun on each machine, like any other strategy.

The runner starts ``drivetrain.cli.child`` on every host of the hostfile; drivetrain's
variables (the run's resolved choice and options) reach remote hosts through DeepSpeed's
environment file (``DS_ENV_FILE``), which this launcher writes for the job.
"""

from __future__ import annotations

import argparse
import os
import sys

# Launching's own modules (subprocess, tempfile, the child module's name) are imported where a
# launch uses them: this module is imported whenever plugins load (`drivetrain plugins list`).
from drivetrain.plugin_api import ConfigError

NAME = "deepspeed"
MULTINODE_LAUNCHERS = ("pdsh", "standard", "openmpi", "mvapich", "mpich", "impi", "slurm", "nossh")
DEFAULT_MULTINODE_LAUNCHER = "pdsh"
#: Variables every host needs (drivetrain's choice and options, and what DeepSpeed reads).
EXPORTED_PREFIXES = ("DRIVETRAIN_", "ACCELERATE_", "DS_ACCELERATOR", "TORCH_EXTENSIONS_DIR", "OMP_NUM_THREADS")
#: Where DeepSpeed's runner looks for environment files (home, then the working directory).
DEEPSPEED_ENV_FILE = ".deepspeed_env"


def multinode_launcher(args: argparse.Namespace) -> str:
    launcher = str(getattr(args, "deepspeed_multinode_launcher", None) or DEFAULT_MULTINODE_LAUNCHER).lower()
    if launcher not in MULTINODE_LAUNCHERS:
        raise ConfigError(f"deepspeed_multinode_launcher must be one of {', '.join(MULTINODE_LAUNCHERS)}, "
                          f"not {launcher!r}")
    return launcher


def applies(args: argparse.Namespace) -> bool:
    """DeepSpeed's launcher runs the job when the config asks for it (see the module doc)."""
    if getattr(args, "strategy", None) != NAME:
        return False
    if multinode_launcher(args) == "standard":
        return False
    return (getattr(args, "num_machines", None) or 1) > 1 or bool(getattr(args, "deepspeed_hostfile", None))


def _free_port() -> int:
    import socket  # only for this launch: plugin discovery imports this module in every process

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def runner_arguments(args: argparse.Namespace) -> list[str]:
    """The command line of ``deepspeed.launcher.runner`` for this job."""
    machines = args.num_machines or 1
    hostfile = getattr(args, "deepspeed_hostfile", None)
    if hostfile:
        path = os.path.expanduser(hostfile)
        if not os.path.isfile(path):
            raise ConfigError(f"deepspeed_hostfile {hostfile} does not exist; it lists the machines, one "
                              "'hostname slots=N' per line")
        hostfile = os.path.abspath(path)
    elif machines > 1:
        raise ConfigError("DeepSpeed's multi-node launcher needs --deepspeed-hostfile (one 'hostname slots=N' line "
                          "per machine), or use --deepspeed-multinode-launcher standard to launch with torchrun "
                          "on each machine")
    include = getattr(args, "deepspeed_inclusion_filter", None)
    exclude = getattr(args, "deepspeed_exclusion_filter", None)
    if include and exclude:
        raise ConfigError("give deepspeed_inclusion_filter or deepspeed_exclusion_filter, not both")
    argv: list[str] = []
    if hostfile:
        argv += ["--hostfile", hostfile]
    if include:
        argv += ["--include", include]
    elif exclude:
        argv += ["--exclude", exclude]
    else:
        argv += ["--num_nodes", str(machines), "--num_gpus", str(args.nproc_per_node)]
    launcher = multinode_launcher(args)
    if launcher == "nossh":
        argv += ["--no_ssh", "--node_rank", str(args.machine_rank or 0)]
    else:
        argv += ["--launcher", launcher]
    if machines == 1:
        argv += ["--no_ssh_check"]  # one machine: DeepSpeed runs the job here, without ssh
    master = args.main_process_ip or ("127.0.0.1" if machines == 1 else None)
    if master:
        argv += ["--master_addr", master]
    port = args.main_process_port or (_free_port() if machines == 1 else 29500)
    argv += ["--master_port", str(port)]
    if args.no_python:
        return argv + ["--no_python", "--no_local_rank", args.training_script, *args.training_script_args]
    from drivetrain.plugin_api import CHILD_MODULE

    return argv + ["--module", "--no_local_rank", CHILD_MODULE,
                   "--module" if args.module else "--script", args.training_script, *args.training_script_args]


def environment_file(env: dict[str, str], directory: str) -> str:
    """Write the variables remote hosts need into a DeepSpeed environment file; returns its path.

    The user's own ``.deepspeed_env`` files (home, working directory) come first, so their
    variables still reach the hosts; drivetrain's follow and win.
    """
    lines: list[str] = []
    for folder in (os.path.expanduser("~"), os.getcwd()):
        own = os.path.join(folder, DEEPSPEED_ENV_FILE)
        if os.path.isfile(own):
            with open(own, encoding="utf-8") as file:
                lines += [line.rstrip("\n") for line in file.read().splitlines() if "=" in line]
    for key, value in sorted(env.items()):
        if key.startswith(EXPORTED_PREFIXES) and "\n" not in value:
            lines.append(f"{key}={value}")
    path = os.path.join(directory, "drivetrain.deepspeed_env")
    with open(path, "w", encoding="utf-8") as file:
        file.write("\n".join(lines) + "\n")
    return path


def launch_deepspeed(args: argparse.Namespace) -> int:
    """Run the job through DeepSpeed's launcher; returns its exit code."""
    import subprocess
    import tempfile

    from .options import deepspeed_accelerator

    argv = runner_arguments(args)
    env = dict(os.environ)
    selection = getattr(args, "selection", None)
    if selection is not None:  # DeepSpeed's runner picks its accelerator too: the run's platform
        env.setdefault("DS_ACCELERATOR", deepspeed_accelerator(selection.platform.name))
    with tempfile.TemporaryDirectory(prefix="drivetrain-deepspeed-") as directory:
        env["DS_ENV_FILE"] = environment_file(env, directory)  # an absolute path: read from any folder
        command = [sys.executable, "-u", "-m", "deepspeed.launcher.runner", *argv]
        result = subprocess.run(command, env=env)
    if result.returncode != 0:
        how = f"killed by signal {-result.returncode}" if result.returncode < 0 else f"exited with code {result.returncode}"
        print(f"drivetrain launch: DeepSpeed's launcher {how}; the failing rank's error is above", file=sys.stderr)
        return 1 if result.returncode < 0 else result.returncode
    return 0
