"""Checks of ``drivetrain launch``'s options, made before any process starts.

Each mistake is one :class:`~drivetrain.errors.ConfigError` line that names the option (or
the config-file key it came from) and the values allowed. A value checked here never reaches
a child, so a bad option cannot end in one traceback per process.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
from typing import Any, Iterable

from ..errors import ConfigError

#: Rendezvous back-ends of torch's elastic agent that ``--rdzv-backend`` accepts.
RDZV_BACKENDS = ("static", "c10d", "etcd", "etcd-v2")


def given_on_command_line(args: argparse.Namespace) -> set[str]:
    """The options set on the command line (before the config file fills the others)."""
    return {name for name, value in vars(args).items() if value is not None}


def _origin(option: str, given: set[str], config: Any, key: str | None = None) -> str:
    if option in given or config is None or not config.path:
        return "--" + option.replace("_", "-")
    return f"config file {config.path}: {key or option}"


def _at_least(args: argparse.Namespace, option: str, minimum: float, given: set[str], config: Any,
              strictly: bool = False, key: str | None = None) -> None:
    value = getattr(args, option, None)
    if value is None:
        return
    if value < minimum or (strictly and value == minimum):
        bound = f"greater than {minimum:g}" if strictly else f"at least {minimum:g}"
        raise ConfigError(f"{_origin(option, given, config, key)} must be {bound}, not {value:g}")


def check_numbers(args: argparse.Namespace, given: set[str]) -> None:
    """Counts, ports and durations: each in its range."""
    config = getattr(args, "config", None)
    for option in ("num_processes", "num_machines", "gradient_accumulation_steps", "num_cpu_threads_per_process"):
        _at_least(args, option, 1, given, config)
    for option in ("machine_rank", "max_restarts"):
        _at_least(args, option, 0, given, config)
    _at_least(args, "timeout", 0, given, config, strictly=True)
    _at_least(args, "monitor_interval", 0, given, config, strictly=True)
    port = getattr(args, "main_process_port", None)
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"{_origin('main_process_port', given, config)} must be a port number between 1 and "
                          f"65535, not {port}")


def check_choices(args: argparse.Namespace, given: set[str]) -> None:
    """Options with a fixed set of values: the rendezvous, the torch.compile back-end."""
    config = getattr(args, "config", None)
    backend = getattr(args, "rdzv_backend", None)
    if backend is not None and backend not in RDZV_BACKENDS:
        raise ConfigError(f"{_origin('rdzv_backend', given, config)} is {backend!r}; allowed: "
                          f"{', '.join(RDZV_BACKENDS)}")
    dynamo = getattr(args, "dynamo_backend", None)
    if dynamo is not None:
        from ..enums import DynamoBackend

        if str(dynamo).upper().replace("-", "_") not in DynamoBackend.names():
            where = _origin("dynamo_backend", given, config, "dynamo_config.dynamo_backend")
            known = [v.lower() for v in DynamoBackend.values()]
            shown = ", ".join(known[:6]) + (f" and {len(known) - 6} more (torch._dynamo.list_backends())"
                                              if len(known) > 6 else "")
            raise ConfigError(f"{where} is {dynamo!r}; torch.compile here knows: {shown}")


def check_precision(args: argparse.Namespace, precisions: Iterable[str]) -> None:
    """``--mixed-precision``: ``no`` or a precision an installed plugin offers."""
    wanted = getattr(args, "mixed_precision", None)
    known = list(precisions)
    if wanted is not None and str(wanted).lower() not in [p.lower() for p in known]:
        raise ConfigError(f"--mixed-precision is {wanted!r}; installed plugins offer: {', '.join(known)}")


def check_target(args: argparse.Namespace) -> None:
    """The script, module or executable to run exists here (each child would fail otherwise)."""
    target = args.training_script
    if args.no_python:
        if shutil.which(target) is None:
            raise ConfigError(f"--no-python: {target!r} is not an executable on PATH or a path to one")
        return
    if args.module:
        top = target.split(".")[0]
        if top not in sys.builtin_module_names and not _importable_from_working_directory(top):
            raise ConfigError(f"-m: no module named {top!r} (looked in the working directory and sys.path); "
                              "check the name or set PYTHONPATH")
        return
    if not os.path.isfile(target):
        where = "" if os.path.isabs(target) else f" (relative to {os.getcwd()})"
        what = "is a directory, not a script" if os.path.isdir(target) else "does not exist"
        raise ConfigError(f"training script {target!r} {what}{where}")


def _importable_from_working_directory(name: str) -> bool:
    """Whether ``python -m`` in this directory would find top-level module ``name``.

    The children put the working directory first on ``sys.path``; the meta-path finders
    (editable installs register one) are asked too, which a bare ``PathFinder`` would skip.
    """
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
    finally:
        sys.path.pop(0)
