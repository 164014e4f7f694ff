"""Checks of ``drivetrain launch``'s options, made before any process starts.

Each mistake is one :class:`~drivetrain.errors.ConfigError` line that names the option (or
the config-file key it came from) and the values allowed. A value checked here never reaches
a child, so a bad option cannot end in one traceback per process.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import sys
from typing import Any, Iterable

from ..kernel.environment import DYNAMO_MODES
from ..kernel.errors import ConfigError

#: Rendezvous back-ends of torch's elastic agent that ``--rdzv-backend`` accepts.
RDZV_BACKENDS = ("static", "c10d", "etcd", "etcd-v2")


def given_on_command_line(args: argparse.Namespace) -> set[str]:
    """The options set on the command line (before the config file fills the others)."""
    return {name for name, value in vars(args).items() if value is not None}


def _origin(option: str, given: set[str], config: Any, key: str | None = None) -> str:
    if option in given or config is None or not config.path:
        return "--" + option.replace("_", "-")
    return f"config file {config.path}: {key or option}"


#: Most processes one machine may start: more than any machine runs, few enough that a typo
#: (``num_processes: 10000000``) is refused instead of starting processes until the machine stalls.
MAX_PROCESSES_PER_MACHINE = 4096

#: Seconds a machine waits to meet the others in the rendezvous (``--rdzv-timeout``); torch's
#: own defaults wait 10 to 15 minutes for a machine 0 that may be unreachable.
DEFAULT_RDZV_TIMEOUT = 300

#: Numeric options: (least value, whether it must be strictly greater, largest value).
BOUNDS: dict[str, tuple[float, bool, float | None]] = {
    "num_processes": (1, False, None),  # at most MAX_PROCESSES_PER_MACHINE per machine, checked below
    "num_machines": (1, False, 2**31 - 1),
    "gradient_accumulation_steps": (1, False, None),
    "num_cpu_threads_per_process": (1, False, None),
    "machine_rank": (0, False, None),
    "max_restarts": (0, False, None),
    "timeout": (0, True, None),
    "preemption_grace": (0, True, None),
    "rdzv_timeout": (0, True, None),
    "monitor_interval": (0, True, None),
    "main_process_port": (0, False, 65535),  # 0: a port free on this machine, chosen at launch
}

#: Options with a fixed set of values.
CHOICES: dict[str, tuple[str, ...]] = {
    "rdzv_backend": RDZV_BACKENDS,
    "dynamo_mode": DYNAMO_MODES,
}

#: Keys of ``--rdzv-conf`` that are durations in seconds.
_RDZV_DURATIONS = ("timeout", "join_timeout", "last_call_timeout", "close_timeout", "read_timeout")


def _check_bound(args: argparse.Namespace, option: str, given: set[str], config: Any) -> None:
    value = getattr(args, option, None)
    if value is None:
        return
    minimum, strictly, maximum = BOUNDS[option]
    where = _origin(option, given, config)
    if option == "main_process_port" and not minimum <= value <= maximum:
        raise ConfigError(f"{where} must be a port number between 1 and 65535 (or 0 for a free one), not {value}")
    if value < minimum or (strictly and value == minimum):
        bound = f"greater than {minimum:g}" if strictly else f"at least {minimum:g}"
        raise ConfigError(f"{where} must be {bound}, not {value:g}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{where} must be at most {maximum}, not {value:g}")


def check_numbers(args: argparse.Namespace, given: set[str]) -> None:
    """Counts, ports and durations: each in its range (:data:`BOUNDS`)."""
    config = getattr(args, "config", None)
    for option in BOUNDS:
        _check_bound(args, option, given, config)
    processes, machines = getattr(args, "num_processes", None), getattr(args, "num_machines", None) or 1
    if processes is not None and processes > MAX_PROCESSES_PER_MACHINE * machines:
        raise ConfigError(f"{_origin('num_processes', given, config)} is {processes}: more than "
                          f"{MAX_PROCESSES_PER_MACHINE} processes per machine on {machines} machine(s); "
                          "num_processes counts every process of the job, check the number")


def check_choices(args: argparse.Namespace, given: set[str]) -> None:
    """Options with a fixed set of values (:data:`CHOICES`), the torch.compile back-end and ``--tee``."""
    config = getattr(args, "config", None)
    for option, allowed in CHOICES.items():
        value = getattr(args, option, None)
        if value is not None and value not in allowed:
            where = _origin(option, given, config, f"dynamo_config.{option}" if option.startswith("dynamo") else None)
            raise ConfigError(f"{where} is {value!r}; allowed: {', '.join(allowed)}")
    tee = getattr(args, "tee", None)
    if tee is not None and not re.fullmatch(r"[0-3]|\d+:[0-3](,\d+:[0-3])*", str(tee).replace(" ", "")):
        raise ConfigError(f"--tee is {tee!r}; use 0 (none), 1 (stdout), 2 (stderr), 3 (both), or a value per "
                          "local rank such as 0:3,1:1")
    dynamo = getattr(args, "dynamo_backend", None)
    if dynamo is not None:
        from ..selection.enums import DynamoBackend

        if str(dynamo).upper().replace("-", "_") not in DynamoBackend.names():
            where = _origin("dynamo_backend", given, config, "dynamo_config.dynamo_backend")
            known = [v.lower() for v in DynamoBackend.values()]
            shown = ", ".join(known[:6]) + (f" and {len(known) - 6} more (torch._dynamo.list_backends())"
                                              if len(known) > 6 else "")
            raise ConfigError(f"{where} is {dynamo!r}; torch.compile here knows: {shown}")


def check_rendezvous(args: argparse.Namespace, given: set[str]) -> None:
    """``--main-process-ip`` is an address or a host name that resolves; ``--rdzv-conf`` is
    ``key=value`` pairs whose durations are positive."""
    config = getattr(args, "config", None)
    if getattr(args, "main_process_port", None) == 0 and (getattr(args, "num_machines", None) or 1) > 1:
        raise ConfigError(f"{_origin('main_process_port', given, config)} is 0 (a free port of this machine), but "
                          "the other machines cannot learn it; give machine 0's port (e.g. 29500)")
    host = getattr(args, "main_process_ip", None)
    if host is not None:
        problem = host_problem(str(host))
        if problem:
            raise ConfigError(f"{_origin('main_process_ip', given, config)} {host!r} {problem}; give the IP address "
                              "or host name of machine 0")
    conf = getattr(args, "rdzv_conf", None)
    if conf:
        for part in str(conf).split(","):
            key, equals, value = part.partition("=")
            if not equals or not key.strip():
                raise ConfigError(f"--rdzv-conf {conf!r}: {part!r} is not key=value; write key=value,key=value "
                                  "(e.g. join_timeout=900)")
            if key.strip() in _RDZV_DURATIONS:
                try:
                    seconds = float(value)
                except ValueError:
                    seconds = -1.0
                if not seconds > 0:
                    raise ConfigError(f"--rdzv-conf {key.strip()}={value!r} must be a positive number of seconds")


#: Seconds a host name may take to resolve before the launch goes on without the answer.
RESOLVE_TIMEOUT = 5.0

_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def host_problem(host: str) -> str | None:
    """What is wrong with ``host`` as the address of machine 0, or ``None``.

    An IP address is taken as it is; a host name must be one by its syntax and resolve. A
    resolver that has not answered within :data:`RESOLVE_TIMEOUT` seconds is not waited for
    (torch resolves it again when it connects).
    """
    import ipaddress

    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    if not name or len(name) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in name.split(".")):
        return "is neither an IP address nor a host name"
    return _resolution_problem(name)


def _resolution_problem(name: str) -> str | None:
    import concurrent.futures
    import socket

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        pool.submit(socket.getaddrinfo, name, None).result(timeout=RESOLVE_TIMEOUT)
    except socket.gaierror as exc:
        return f"does not resolve ({exc.strerror or exc})"
    except (concurrent.futures.TimeoutError, OSError):
        return None
    finally:
        pool.shutdown(wait=False)
    return None


def check_log_dir(args: argparse.Namespace) -> None:
    """``--log-dir`` is a directory, or can become one (nothing on its path is a file)."""
    log_dir = getattr(args, "log_dir", None)
    if not log_dir:
        return
    path = os.path.abspath(os.path.expanduser(str(log_dir)))
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        what = "is a file" if probe == path else f"cannot be created: {probe} is a file"
        raise ConfigError(f"--log-dir {log_dir} {what}; name a directory")


def check_port_free(args: argparse.Namespace, given: set[str]) -> None:
    """On machine 0, ``--main-process-port`` is free here: the rendezvous binds it, and a port in
    use would end the job in torch's ``EADDRINUSE`` traceback after the processes started."""
    port = getattr(args, "main_process_port", None)
    if not port or getattr(args, "machine_rank", 0):
        return
    import errno
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's store does
        try:
            sock.bind(("", int(port)))
            return
        except OSError as exc:
            reason = "is already in use on this machine" if exc.errno == errno.EADDRINUSE else \
                f"cannot be opened here ({exc.strerror})"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as free:
        free.bind(("", 0))
        suggestion = free.getsockname()[1]
    raise ConfigError(f"{_origin('main_process_port', given, getattr(args, 'config', None))} {port} {reason}; "
                      f"choose another (e.g. {suggestion}, free now), or leave it out on one machine for a free one")


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
