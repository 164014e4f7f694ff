"""Helpers for starting processes (``accelerate.utils.launch``).

They work on the arguments ``drivetrain launch`` parses; the environment of a child is the
one ``drivetrain launch`` computes (the resolved choice, plugin options and launch
variables), so a library that starts its own processes gives them the same run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from shutil import which
from typing import Any, Callable, Sequence

from ..selection.enums import DistributedType
from ..kernel.errors import LaunchError
from ..kernel.contributed import surface_getattr


class PrepareForLaunch:
    """Wraps a function for ``torch.multiprocessing.start_processes``: process ``index`` sets
    the rank variables a launcher would have set, then calls ``launcher(*args)``.

    Args:
        launcher: the function to run in each process.
        distributed_type: a multi-process ``DistributedType`` sets ``LOCAL_RANK``/``RANK``;
            ``NO`` runs the function as it is.
        debug: run the processes in the debug mode of ``debug_launcher`` (CPU, checks on).
    """

    def __init__(self, launcher: Callable[..., Any], distributed_type: str = "NO", debug: bool = False) -> None:
        self.launcher = launcher
        self.distributed_type = DistributedType(distributed_type)
        self.debug = debug

    def __call__(self, index: int, *args: Any) -> Any:
        if self.debug:
            world_size = int(os.environ.get("WORLD_SIZE", "1"))
            os.environ.update(LOCAL_RANK=str(index), RANK=str(index), WORLD_SIZE=str(world_size),
                              DRIVETRAIN_DEBUG_MODE="1")
        elif self.distributed_type != DistributedType.NO:
            processes_per_node = int(os.environ.get("NPROC", os.environ.get("LOCAL_WORLD_SIZE", "1")))
            node_rank = int(os.environ.get("NODE_RANK", "0"))
            os.environ["LOCAL_RANK"] = str(index)
            os.environ["RANK"] = str(processes_per_node * node_rank + index)
        os.environ["FORK_LAUNCHED"] = "1"
        return self.launcher(*args)


def _resolved(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` completed as ``drivetrain launch`` would: config file merged, defaults filled."""
    from . import launch_cmd
    from ..kernel.plugin_manager import get_plugin_manager

    if getattr(args, "selection", None) is not None:
        return args
    manager = get_plugin_manager()
    launch_cmd.fill_missing_options(args)
    launch_cmd.merge_config(args)
    requests = launch_cmd.requests_for(args, manager)
    if args.num_processes is None:
        args.num_processes = launch_cmd._default_num_processes(args, manager, requests)
    launch_cmd._defaults(args)
    args.selection = launch_cmd.resolve_choice(args, manager, requests)
    return args


def find_executable(name: str) -> str | None:
    """The path of the program ``name`` on ``PATH``, or ``None``: the one look-up launchers use,
    so a test replaces ``drivetrain.utils.launch.which`` for all of them."""
    return which(name)


def program_version(name: str) -> str:
    """What ``name --version`` prints (standard output and error), to tell implementations of a
    program apart (Open MPI from Intel MPI); empty when it cannot run."""
    try:
        out = subprocess.check_output([name, "--version"], stderr=subprocess.STDOUT)
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out.decode(errors="replace") if isinstance(out, bytes) else str(out)


def _command_prefix(args: argparse.Namespace, env: dict[str, str]) -> list[str]:
    """What the launcher plugin that applies puts before the command (``mpirun ...``), if any."""
    from ..kernel.plugin_manager import get_plugin_manager

    manager = get_plugin_manager()
    found = [(spec.priority, plugin, spec) for plugin, spec in
             manager.registrations("drivetrain_register_launchers", usable_only=True)
             if spec.command_prefix is not None and spec.applies(args)]
    if not found:
        return []
    _priority, plugin, spec = max(found, key=lambda item: item[0])
    prefix = manager.resolve_factory(plugin, spec, f"launcher {spec.name!r}", attribute="command_prefix")
    return list(prefix(args, env))


def prepare_simple_launcher_cmd_env(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a launch of ``args`` as one command: the script run by
    Python (``python script args``, as Accelerate's simple launcher runs it), behind the words of
    a launcher plugin that starts every process itself (``mpirun -f hostfile ...``)."""
    from .launch_cmd import child_environment

    args = _resolved(args)
    env = dict(os.environ)
    env.update(child_environment(args, args.selection))
    if getattr(args, "no_python", False):
        command = [args.training_script]
    else:
        command = [sys.executable, *(["-m"] if getattr(args, "module", False) else []), args.training_script]
    return [*_command_prefix(args, env), *command, *args.training_script_args], env


def prepare_multi_gpu_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment of every process of a multi-process launch of ``args`` (the rank
    variables are added by the elastic agent that starts them).

    ``main_process_port`` 0 is replaced by a port free on this machine; the port is also left
    in ``args.master_port`` (text), the name torchrun's arguments use.
    """
    from ..services.launchers import free_port
    from .launch_cmd import child_environment

    args = _resolved(args)
    if getattr(args, "main_process_port", None) == 0:
        args.main_process_port = free_port()
    if getattr(args, "main_process_port", None) is not None:
        args.master_port = str(args.main_process_port)
    env = dict(os.environ)
    env.update(child_environment(args, args.selection))
    env.setdefault("OMP_NUM_THREADS", str(getattr(args, "num_cpu_threads_per_process", None) or 1))
    return env


def prepare_sagemager_args_inputs(sagemaker_config: Any, args: argparse.Namespace) -> tuple[argparse.Namespace,
                                                                                             dict[str, Any]]:
    """Accelerate's conversion of a launch into an Amazon SageMaker estimator's arguments.

    drivetrain does not launch jobs on SageMaker (no plugin provides it), so this refuses
    instead of returning arguments for a launch that cannot happen. Inside a SageMaker
    training job, ``drivetrain launch`` runs like on any machine.
    """
    raise LaunchError("drivetrain cannot launch on Amazon SageMaker: start the job with SageMaker's own estimator "
                      "and run `drivetrain launch` (or torchrun) inside it; set compute_environment: LOCAL_MACHINE")


def _typed(value: str) -> Any:
    """A script argument's value as the type it spells: ``True``/``False``, an int, a float, or text."""
    if value in ("True", "False"):
        return value == "True"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _convert_nargs_to_dict(nargs: Sequence[str]) -> dict[str, Any]:
    """Training-script arguments (``["--epochs", "3", ...]``) as a dict of typed values, the form a
    SageMaker estimator's hyperparameters take.

    Raises:
        ValueError: an option has no value (a ``store_true`` flag): hyperparameters need one.
    """
    result: dict[str, Any] = {}
    items = list(nargs)
    index = 0
    while index < len(items):
        item = items[index]
        value = items[index + 1] if index + 1 < len(items) else None
        if value is None or value.startswith("-") and not _is_number(value):
            raise ValueError(f"option {item} has no value; SageMaker hyperparameters need one, "
                             f"so write {item} True (or False) instead of a bare flag")
        result[item.lstrip("-")] = _typed(value)
        index += 2
    return result


def _is_number(text: str) -> bool:
    return not isinstance(_typed(text), (str, bool))


def _filter_args(args: argparse.Namespace, parser: argparse.ArgumentParser,
                 default_args: Sequence[str] = ()) -> argparse.Namespace:
    """The options of ``args`` that ``parser`` knows, others dropped, parser defaults filled in."""
    known = vars(parser.parse_args(list(default_args)))
    return argparse.Namespace(**{key: value for key, value in vars(args).items() if key in known})


# names a plugin contributes to this module (keys "utils.launch.<name>"), served on first access
__getattr__ = surface_getattr("drivetrain.utils.launch")
