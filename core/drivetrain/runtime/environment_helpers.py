"""Reading, patching and clearing the environment (``accelerate.utils.environment``)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import platform
import socket
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, TypeVar

from packaging.version import InvalidVersion, parse
from ..kernel.contributed import surface_getattr

logger = logging.getLogger("drivetrain.utils.environment")  # its name before the layers, kept for log filters

_TRUE = ("y", "yes", "t", "true", "on", "1")
_FALSE = ("n", "no", "f", "false", "off", "0")

#: Environment prefixes a run writes: drivetrain's own and the Accelerate aliases it reads.
RUN_VARIABLE_PREFIXES = ("DRIVETRAIN_", "ACCELERATE_")

T = TypeVar("T")


def str_to_bool(value: str, to_bool: bool = False) -> int | bool:
    """``1`` for a true word (y, yes, t, true, on, 1), ``0`` for a false one; ``ValueError`` otherwise.

    With ``to_bool=True`` the answer is a ``bool``.
    """
    text = str(value).strip().lower()
    if text in _TRUE:
        answer = 1
    elif text in _FALSE:
        answer = 0
    else:
        raise ValueError(f"invalid truth value {value!r}; use one of {', '.join(_TRUE + _FALSE)}")
    return bool(answer) if to_bool else answer


def get_int_from_env(env_keys: Iterable[str], default: int) -> int:
    """The first of ``env_keys`` set to a non-negative integer, else ``default``.

    Raises:
        ConfigError: one of them holds something that is not a whole number.
    """
    from ..kernel.cluster import int_var

    for key in env_keys:
        value = int_var(os.environ, key, default=-1)
        if value >= 0:
            return value
    return default


def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """Whether variable ``key`` holds a true word (``default`` when unset)."""
    return str_to_bool(os.environ.get(key, str(default))) == 1


def parse_choice_from_env(key: str, default: str = "no") -> str:
    """The value of ``key``, or ``default`` (as a string) when unset."""
    return os.environ.get(key, str(default))


def are_libraries_initialized(*library_names: str) -> list[str]:
    """Those of ``library_names`` already imported in this process."""
    return [name for name in library_names if name in sys.modules]


def convert_dict_to_env_variables(current_env: dict[str, str]) -> list[str]:
    """``KEY=VALUE`` lines for an environment file; entries that would break the file are skipped with a warning."""
    forbidden = (";", "\n", "<", ">", " ")
    lines = []
    for key, value in current_env.items():
        if any(char in str(key) or char in str(value) for char in forbidden) or not key or not str(value):
            logger.warning("not writing %r=%r: empty, or holds one of ; newline < > space", key, value)
            continue
        lines.append(f"{key}={value}\n")
    return lines


@dataclass
class CPUInformation:
    """Where this process stands among CPU processes started by an MPI or PyTorch launcher."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


def get_cpu_distributed_information() -> CPUInformation:
    """Ranks and sizes from the variables of torchrun, Open MPI, Intel MPI / MPICH or MVAPICH (0 and 1 when none)."""
    return CPUInformation(
        rank=get_int_from_env(["RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"], 0),
        world_size=get_int_from_env(["WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"], 1),
        local_rank=get_int_from_env(
            ["LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK"], 0),
        local_world_size=get_int_from_env(
            ["LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE"], 1),
    )


#: Linux kernels older than this can hang processes that share memory heavily.
MINIMUM_KERNEL_VERSION = "5.5.0"


def check_os_kernel() -> None:
    """Warn (one line) when running on a Linux kernel older than :data:`MINIMUM_KERNEL_VERSION`."""
    info = platform.uname()
    if info.system != "Linux":
        return
    release = info.release.split("-")[0]
    try:
        too_old = parse(release) < parse(MINIMUM_KERNEL_VERSION)
    except InvalidVersion:
        return
    if too_old:
        # formatted here, not by logging: log filters (and Accelerate's tests) read the record's msg
        logger.warning(f"Linux kernel {release} is older than {MINIMUM_KERNEL_VERSION}: processes may hang; "
                       "upgrade the kernel")


def is_port_in_use(port: int | None = None) -> bool:
    """Whether something on this machine listens on ``port`` (default: 29500, torchrun's)."""
    port = 29500 if port is None else int(port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("localhost", port)) == 0


@contextlib.contextmanager
def clear_environment() -> Iterator[None]:
    """Run the block with an empty ``os.environ``; the previous environment comes back afterwards."""
    saved = os.environ.copy()
    os.environ.clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def patch_environment(**kwargs: Any) -> Iterator[None]:
    """Set upper-cased ``kwargs`` as variables for the block; afterwards each is restored or removed."""
    previous: dict[str, str | None] = {}
    for key, value in kwargs.items():
        key = key.upper()
        previous.setdefault(key, os.environ.get(key))
        os.environ[key] = str(value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run_variables() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(RUN_VARIABLE_PREFIXES)}


def _restore_run_variables(before: dict[str, str]) -> None:
    for key in list(os.environ):
        if key.startswith(RUN_VARIABLE_PREFIXES) and key not in before:
            del os.environ[key]
    os.environ.update(before)


def _purge_own_members(cls: type) -> None:
    for name, member in list(vars(cls).items()):
        if callable(member) and (name.startswith("test") or name in ("setUp", "tearDown")):
            setattr(cls, name, purge_accelerate_environment(member))


def _purge_subclasses(cls: type) -> None:
    """Make every subclass of ``cls`` purge its own test methods too: a test class that inherits
    from a decorated base would otherwise leak the variables its new tests set."""
    own_hook = vars(cls).get("__init_subclass__")

    def __init_subclass__(subclass: type, **kwargs: Any) -> None:
        if own_hook is not None:
            own_hook.__get__(None, subclass)(**kwargs)
        else:
            super(cls, subclass).__init_subclass__(**kwargs)
        _purge_own_members(subclass)

    cls.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]


def purge_accelerate_environment(func_or_cls: T) -> T:
    """Decorator: the ``DRIVETRAIN_*``/``ACCELERATE_*`` variables a function (or each test
    method, ``setUp`` and ``tearDown`` of a class) sets do not outlive it.

    ``Accelerator`` and the launch helpers export such variables; without this, a test that
    builds an ``Accelerator`` would change the ones after it.
    """
    if inspect.isclass(func_or_cls):
        _purge_own_members(func_or_cls)
        _purge_subclasses(func_or_cls)
        return func_or_cls

    func: Callable[..., Any] = func_or_cls  # type: ignore[assignment]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before = _run_variables()
        try:
            return func(*args, **kwargs)
        finally:
            _restore_run_variables(before)

    return wrapper  # type: ignore[return-value]


def get_current_device_type() -> str:
    """The device type of this process's platform (``"cpu"``, or the accelerator's type)."""
    from .state import PartialState

    return PartialState().device.type


# names a plugin contributes to this module (keys "utils.environment.<name>"), served on first access
__getattr__ = surface_getattr("drivetrain.utils.environment")
