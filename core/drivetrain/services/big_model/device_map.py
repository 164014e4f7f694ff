"""Device maps: which module's weights go to which device, the CPU, or disk.

A device map is ``{"module.name": device}``; a device is a platform device index (``0``),
``"cpu"`` or ``"disk"``. :func:`infer_auto_device_map` fills devices in order (the platform's,
then the CPU, then disk), splitting a module into its children only when it does not fit and
its class may be split.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import torch
from torch import nn

from ...kernel.errors import ConfigError
from .modeling import (
    DISK,
    HOST,
    as_dtype,
    check_device,
    clean_device_map,
    compute_module_sizes,
    dtype_byte_size,
    find_tied_parameters,
    get_max_layer_size,
    get_max_memory,
)
from ...kernel.contributed import contributed_getattr

logger = logging.getLogger("drivetrain.utils.device_map")  # its name before the layers, kept for log filters

__all__ = ["infer_auto_device_map", "get_balanced_memory", "check_device_map", "resolve_device_map",
           "validate_device_map"]

STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def get_balanced_memory(model: nn.Module, max_memory: dict[int | str, int | str] | None = None,
                        no_split_module_classes: list[str] | None = None, dtype: torch.dtype | str | None = None,
                        special_dtypes: dict[str, Any] | None = None, low_zero: bool = False) -> dict[int | str, int]:
    """A ``max_memory`` that spreads ``model`` evenly over the platform's devices.

    Each device gets the model size divided by the number of devices (leaving device 0 as
    free as possible with ``low_zero``) plus room for the largest layer, never more than it
    has. With fewer than two platform devices the memory is returned unchanged.
    """
    user_gave = max_memory is not None
    max_memory = get_max_memory(max_memory)
    devices = [key for key in max_memory if isinstance(key, int) and max_memory[key] > 0]
    if len(devices) < 2 or (low_zero and len(devices) < 2):
        return max_memory
    if len(devices) == 2 and low_zero and not user_gave:
        return max_memory
    sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    sharing = len(devices) - (1 if low_zero else 0)
    per_device = sizes[""] // sharing + (sizes[""] % sharing > 0)
    no_split = list(no_split_module_classes or []) + list(getattr(model, "_no_split_modules", None) or [])
    leaves = [name for name, module in model.named_modules() if name and not list(module.children())]
    layer = max([sizes.get(name, 0) for name in leaves] or [0])
    if no_split:
        layer = max(layer, get_max_layer_size(list(model.named_children()), sizes, no_split)[0])
    budget = per_device + int(layer * 1.25)
    balanced = dict(max_memory)
    for position, index in enumerate(devices):
        if low_zero and position == 0:
            balanced[index] = 0 if max_memory[index] < layer else min(layer, max_memory[index])
            continue
        balanced[index] = min(budget, max_memory[index])
    return balanced


def _expand(name: str, module: nn.Module) -> list[tuple[str, Any]]:
    """The direct parameters, buffers and children of ``module``, each named in full."""
    prefix = f"{name}." if name else ""
    parts: list[tuple[str, Any]] = [(prefix + n, p) for n, p in module.named_parameters(recurse=False)]
    parts += [(prefix + n, m) for n, m in module.named_children()]
    parts += [(prefix + n, b) for n, b in module.named_buffers(recurse=False)]
    return parts


def _owner(name: str, names: set[str]) -> str | None:
    probe = name
    while probe:
        if probe in names:
            return probe
        probe = probe.rpartition(".")[0]
    return None


def infer_auto_device_map(model: nn.Module, max_memory: dict[int | str, int | str] | None = None,
                          no_split_module_classes: list[str] | None = None, dtype: torch.dtype | str | None = None,
                          special_dtypes: dict[str, Any] | None = None, verbose: bool = False,
                          clean_result: bool = True, offload_buffers: bool = False,
                          fallback_allocation: bool = False) -> dict[str, int | str]:
    """Assign every module of ``model`` to a device within ``max_memory``.

    Devices are filled in order: platform devices, ``"cpu"``, ``"disk"`` (always available).
    The first platform device and the CPU keep room for the largest layer, since offloaded
    layers are brought there to run. A module that does not fit is split into its children
    unless its class is in ``no_split_module_classes``; tied parameters are placed with the
    module that holds them first. ``fallback_allocation`` lets a device that cannot take the
    next module take a later leaf module that fits, rather than stay empty.

    Offloaded modules (on ``"cpu"`` or ``"disk"`` when a platform device runs them, on
    ``"disk"`` when the CPU does) keep their buffers on the main device unless
    ``offload_buffers``: those buffers count against the main device's memory.
    """
    memory = get_max_memory(max_memory)
    if DISK not in memory:
        memory[DISK] = float("inf")
    sizes = compute_module_sizes(model, dtype=as_dtype(dtype), special_dtypes=special_dtypes)
    platform_devices = [d for d in memory if d not in (HOST, DISK)]
    main_device = platform_devices[0] if platform_devices else HOST
    reserved = 0
    while True:
        budget = dict(memory)
        if main_device in budget:
            budget[main_device] = budget[main_device] - reserved
        device_map = _assign(model, budget, sizes, no_split_module_classes, fallback_allocation, verbose)
        if offload_buffers:
            break
        # Buffers of offloaded modules are not offloaded: they live on the main device, so the
        # map is made again with room kept for them until that room is enough.
        needed = _offloaded_buffer_bytes(model, device_map, main_device, dtype)
        if needed <= reserved:
            break
        reserved = needed
        if verbose:
            logger.info("keeping %d bytes of %s for the buffers of offloaded modules", reserved, main_device)
    used = set(map(str, device_map.values()))
    for device in platform_devices:
        if str(device) not in used and memory[device] > 0:
            # Said, not silent: a device left empty usually means max_memory or the split is wrong.
            logger.warning("device %s was given no module: its %s bytes are insufficient memory for the next module "
                           "and the room kept for the largest layer; give it more max_memory, split the model more "
                           "finely (no_split_module_classes) or pass fallback_allocation=True", device,
                           memory[device])
    if clean_result:
        device_map = clean_device_map(device_map)
    return device_map


def _offloaded_buffer_bytes(model: nn.Module, device_map: dict[str, Any], main_device: Any, dtype: Any) -> int:
    """Bytes of the buffers of the entries ``device_map`` offloads (which stay on ``main_device``)."""
    offloaded = {DISK} if main_device == HOST else {HOST, DISK}
    names = {name for name, device in device_map.items() if device in offloaded}
    if not names:
        return 0
    dtype = as_dtype(dtype)
    total = 0
    for name, buffer in model.named_buffers():
        if "" in names or _owner(name, names) is not None:
            element = buffer.element_size()
            if dtype is not None and buffer.is_floating_point():
                element = min(element, dtype_byte_size(dtype))
            total += int(buffer.numel() * element)
    return total


def _assign(model: nn.Module, memory: dict[Any, Any], sizes: dict[str, int], no_split_module_classes: list[str] | None,
            fallback_allocation: bool, verbose: bool) -> dict[str, Any]:
    """One pass of :func:`infer_auto_device_map` within ``memory`` (not cleaned)."""
    devices = list(memory)
    no_split = set(no_split_module_classes or [])
    tied_groups = find_tied_parameters(model)
    platform_devices = [d for d in devices if d not in (HOST, DISK)]
    main_devices = ([platform_devices[0]] if platform_devices else []) + [HOST]

    pending: deque[tuple[str, Any]] = deque(_expand("", model))
    device_map: dict[str, int | str] = {}
    position = 0
    used = 0
    reserve: int | None = None

    def layer_size() -> int:
        modules = [(n, m) for n, m in pending if isinstance(m, nn.Module)]
        size = get_max_layer_size(modules, sizes, list(no_split))[0]
        tensors = [sizes.get(n, 0) for n, m in pending if not isinstance(m, nn.Module)]
        return max([size, *tensors])

    while pending and position < len(devices):
        name, thing = pending[0]
        device = devices[position]
        size = sizes.get(name, 0)
        # Everything tied to this entry's parameters that is still pending goes with it.
        partners: list[str] = []
        prefix = f"{name}."
        for group in tied_groups:
            if any(p == name or p.startswith(prefix) for p in group):
                pending_names = {n for n, _ in pending}
                for member in group:
                    owner = _owner(member, pending_names)
                    if owner is not None and owner != name and owner not in partners:
                        partners.append(owner)
        size += sum(sizes.get(p, 0) for p in partners)
        limit = memory[device]
        if device in main_devices and device != DISK:
            if reserve is None:  # recomputed when the device or the pending modules change shape
                reserve = layer_size()
            limit -= reserve
        if used + size <= limit or device == DISK:
            for entry in [name, *partners]:
                device_map[entry] = device
            pending.popleft()
            if partners:
                moved = set(partners)
                pending = deque((n, m) for n, m in pending if n not in moved)
            used += size
            if verbose:
                logger.info("%s (%d bytes) -> %s", name, size, device)
            continue
        splittable = isinstance(thing, nn.Module) and list(thing.children()) and \
            thing.__class__.__name__ not in no_split
        if splittable:
            pending.popleft()
            pending.extendleft(reversed(_expand(name, thing)))
            reserve = None
            continue
        if fallback_allocation and used == 0:
            fits = next((i for i, (n, m) in enumerate(pending) if sizes.get(n, 0) <= limit
                         and (not isinstance(m, nn.Module) or not list(m.children()))), None)
            if fits is not None:
                fallback_name, _ = pending[fits]
                del pending[fits]
                device_map[fallback_name] = device
                used += sizes.get(fallback_name, 0)
                continue
        if verbose:
            logger.info("%s (%d bytes) does not fit on %s (%d of %d used); next device", name, size, device, used, limit)
        position += 1
        used = 0
        reserve = None
    return device_map


def validate_device_map(model: nn.Module, device_map: dict[str, Any]) -> None:
    """Fail, before anything is placed, when ``device_map`` names a module (or tensor) that
    ``model`` does not have or a device that does not exist here (:func:`check_device`)."""
    if not isinstance(device_map, dict):
        raise ConfigError(f"device_map is a {type(device_map).__name__}; give a dict {{'module.name': device}} or "
                          f"one of {', '.join(STRATEGIES)}")
    known = {""} | {name for name, _ in model.named_modules()}
    known.update(name for name, _ in model.named_parameters(remove_duplicate=False))
    known.update(name for name, _ in model.named_buffers(remove_duplicate=False))
    unknown = [name for name in device_map if name not in known]
    if unknown:
        raise ConfigError(f"the device map names {', '.join(map(repr, unknown[:5]))}, which {type(model).__name__} "
                          "has no module, parameter or buffer of; use names from model.named_modules()")
    for name, device in device_map.items():
        check_device(device, f"the device map (entry {name!r})")


def check_device_map(model: nn.Module, device_map: dict[str, Any]) -> None:
    """Fail when ``device_map`` names what is not in ``model`` or here, or leaves some
    parameter or buffer of ``model`` uncovered."""
    validate_device_map(model, device_map)
    if "" in device_map:
        return
    keys = set(device_map)
    missing = [name for name, _ in list(model.named_parameters()) + list(model.named_buffers())
               if _owner(name, keys) is None]
    if missing:
        raise ConfigError(f"the device map does not place {', '.join(missing[:5])}"
                          f"{' ...' if len(missing) > 5 else ''}; add these modules (or a parent) to it")


def resolve_device_map(model: nn.Module, device_map: Any, max_memory: dict[int | str, int | str] | None,
                       no_split_module_classes: list[str] | None, dtype: Any,
                       offload_buffers: bool = False) -> dict[str, Any] | None:
    """A device map from a strategy name (``"auto"``, ``"balanced"``, ...) or as given, checked
    (:func:`validate_device_map`)."""
    if device_map is None:
        return device_map
    if isinstance(device_map, dict):
        validate_device_map(model, device_map)
        return device_map
    if isinstance(device_map, (int, torch.device)) or (isinstance(device_map, str) and device_map not in STRATEGIES):
        validate_device_map(model, {"": device_map})
        return {"": device_map}
    if device_map not in STRATEGIES:
        raise ConfigError(f"device_map={device_map!r} is not a strategy; use one of {', '.join(STRATEGIES)} or a dict")
    no_split = list(no_split_module_classes or []) or list(getattr(model, "_no_split_modules", None) or [])
    if device_map != "sequential":
        max_memory = get_balanced_memory(model, max_memory, no_split, dtype=dtype,
                                         low_zero=device_map == "balanced_low_0")
    return infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=no_split, dtype=dtype,
                                 offload_buffers=offload_buffers)


# names a plugin contributes to this module (keys "utils.device_map.<name>"), served on first access
__getattr__ = contributed_getattr("drivetrain.utils.device_map")
