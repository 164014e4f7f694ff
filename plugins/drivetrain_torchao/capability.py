"""Cheap probes: is torchao installed, and can this machine run its float8 matmuls."""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Any, Callable, TypeVar

from drivetrain.plugin_api import ConfigError, Probe

_Function = TypeVar("_Function", bound=Callable[..., Any])


def environment_flag(name: str, default: bool) -> bool:
    """A boolean launch variable (``ACCELERATE_<name>`` or ``DRIVETRAIN_<name>``)."""
    for prefix in ("DRIVETRAIN_", "ACCELERATE_"):
        value = os.environ.get(prefix + name)
        if value is not None:
            return value.strip().lower() in ("1", "true", "yes", "on")
    return default


def is_torchao_available() -> bool:
    return importlib.util.find_spec("torchao") is not None


def torchao_required(function: _Function) -> _Function:
    """Decorate a function that needs torchao: calling it without torchao says how to install it."""

    @functools.wraps(function)
    def needs_torchao(*args: Any, **kwargs: Any) -> Any:
        if not is_torchao_available():
            raise ConfigError(f"{function.__qualname__} needs torchao; install it with "
                              "pip install 'drivetrain[torchao]'")
        return function(*args, **kwargs)

    return needs_torchao  # type: ignore[return-value]


def check_cuda_fp8_capability() -> bool:
    """The cuda plugin's answer (through the public names), ``False`` without that plugin."""
    from drivetrain.plugin_api import contributed

    return bool(contributed("utils.check_cuda_fp8_capability", lambda: False)())


def probe() -> Probe:
    """torchao must be installed; on a GPU the GPU needs float8 units, on the CPU torchao emulates."""
    if not is_torchao_available():
        return Probe(False, "torchao is not installed (pip install 'drivetrain[torchao]')")
    import torch

    if torch.cuda.is_available() and not check_cuda_fp8_capability():
        major, minor = torch.cuda.get_device_capability()
        return Probe(False, f"fp8 needs a GPU of compute capability 8.9 or newer (Ada, Hopper, Blackwell); "
                            f"this one has {major}.{minor}: use bf16")
    return Probe(True, "torchao float8 training" + ("" if torch.cuda.is_available() else " (emulated on the CPU)"))
