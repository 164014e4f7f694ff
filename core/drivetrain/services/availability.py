"""Availability probes: ``is_<library>_available()`` (``accelerate.utils.imports``).

The probes of general-purpose libraries live here. A backend's probe comes from the plugin
that owns the backend (``drivetrain_public_names``), and a probe Accelerate offers for a
backend that no installed plugin provides answers ``False`` (a stand-in contributed through
``drivetrain_fallback_names``): this module names no backend.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from typing import Any, Callable

from ..selection.versions import compare_versions, is_torch_version
from ..kernel.contributed import surface_getattr, resolve_module_name


@functools.lru_cache(maxsize=None)
def is_package_available(module: str, distribution: str | None = None, minimum: str | None = None) -> bool:
    """Whether ``module`` can be imported, without importing it.

    ``distribution`` (default: the module's name) and ``minimum`` add a version check of the
    installed distribution; a module found without installed metadata counts as available
    when no minimum is asked.
    """
    try:
        if importlib.util.find_spec(module) is None:
            return False
    except (ImportError, ValueError):
        return False
    if minimum is None:
        return True
    try:
        return compare_versions(distribution or module, ">=", minimum)
    except importlib.metadata.PackageNotFoundError:
        return False


def _probe(module: str, distribution: str | None = None, minimum: str | None = None) -> Callable[[], bool]:
    def probe() -> bool:
        return is_package_available(module, distribution, minimum)

    probe.__name__ = f"is_{module}_available"
    probe.__doc__ = f"Whether ``{module}`` is installed{f' (>= {minimum})' if minimum else ''}."
    return probe


is_boto3_available = _probe("boto3")
is_datasets_available = _probe("datasets")
is_matplotlib_available = _probe("matplotlib")
is_pandas_available = _probe("pandas")
is_peft_available = _probe("peft")
is_pytest_available = _probe("pytest")
is_rich_available = _probe("rich")
is_sagemaker_available = _probe("sagemaker")
is_schedulefree_available = _probe("schedulefree")
is_timm_available = _probe("timm")
is_torchdata_available = _probe("torchdata")
is_torchvision_available = _probe("torchvision")
is_transformers_available = _probe("transformers")
is_triton_available = _probe("triton")
is_pynvml_available = _probe("pynvml")
is_amdsmi_available = _probe("amdsmi")
is_import_timer_available = _probe("import_timer")


def is_torchdata_stateful_dataloader_available() -> bool:
    """Whether ``torchdata`` (0.8 or newer) offers ``StatefulDataLoader``."""
    return is_package_available("torchdata", "torchdata", "0.8.0")


def is_lomo_available() -> bool:
    """Whether LOMO optimizers (``lomo_optim``) are installed."""
    return is_package_available("lomo_optim")


def is_weights_only_available() -> bool:
    """Whether ``torch.load(weights_only=True)`` can load the types checkpoints hold (torch >= 2.4)."""
    return is_torch_version(">=", "2.4.0")


def is_pippy_available() -> bool:
    """Whether torch ships pipeline parallelism (``torch.distributed.pipelining``)."""
    return is_torch_version(">=", "2.4.0")


def is_fp16_available() -> bool:
    """Whether this process's platform can run fp16 autocast."""
    return _platform_supports("float16")


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """Whether this process's platform can run bf16 autocast."""
    return _platform_supports("bfloat16")


def _platform_supports(dtype_name: str) -> bool:
    import torch

    from ..runtime.state import PartialState

    return bool(PartialState().platform.supports_autocast(getattr(torch, dtype_name)))


def absent_probe(name: str) -> Callable[..., bool]:
    """A probe named ``name`` that answers ``False``: its backend is not installed here."""

    def probe(*args: object, **kwargs: object) -> bool:
        return False

    probe.__name__ = probe.__qualname__ = name
    probe.__doc__ = f"``False``: no installed plugin provides what ``{name}`` asks about."
    return probe


# names a plugin contributes to this module (keys "utils.imports.<name>"), served on first access
__getattr__ = surface_getattr("drivetrain.utils.imports", on_request=lambda name: _probe_of_utils(name))


def _probe_of_utils(name: str) -> Any:
    # Accelerate keeps every availability probe here, so `from accelerate.utils.imports import
    # is_deepspeed_available` must work for the probes plugins contribute to `utils`.
    if not (name.startswith("is_") and name.endswith("_available")):
        raise AttributeError(name)
    return resolve_module_name("utils", name)
