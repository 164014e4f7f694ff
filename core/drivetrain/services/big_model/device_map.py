"""Device maps: which module's weights go to which device, the CPU, or disk.

A device map is ``{"module.name": device}``; a device is a platform device index (``0``),
``"cpu"`` or ``"disk"``. :func:`infer_auto_device_map` fills devices in order (the platform's,
then the CPU, then disk), splitting a module into its children only when it does not fit and
its class may be split.
"""

from __future__ import annotations

import logging
import warnings
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
    find_tied_parameters,
    get_max_layer_size,
    get_max_memory,
)
from ...config.schema import suggest
from ...kernel.contributed import surface_getattr

logger = logging.getLogger("drivetrain.utils.device_map")  # its name before the layers, kept for log filters

__all__ = ["infer_auto_device_map", "get_balanced_memory", "check_device_map", "check_devices_exist",
           "refuse_unknown_keys", "resolve_device_map", "validate_device_map"]

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


def _inside(name: str, entry: str) -> bool:
    # "compute.weight_submodule.p" is not inside "compute.weight": compare whole dotted parts.
    return name == entry or name.startswith(f"{entry}.")


def _splittable(thing: Any, no_split: set[str]) -> bool:
    return isinstance(thing, nn.Module) and next(thing.children(), None) is not None and \
        type(thing).__name__ not in no_split


class _Plan:
    """One run of :func:`infer_auto_device_map`: the entries still to place, in order, and
    what each device holds so far."""

    def __init__(self, model: nn.Module, memory: dict[Any, Any], sizes: dict[str, int], buffer_sizes: dict[str, int],
                 no_split: set[str], verbose: bool) -> None:
        self.memory, self.sizes, self.buffer_sizes = memory, sizes, buffer_sizes
        self.no_split, self.verbose = no_split, verbose
        self.tied_groups = find_tied_parameters(model)
        self.pending: list[tuple[str, Any]] = _expand("", model)
        self.device_map: dict[str, Any] = {}
        self.used: dict[Any, int] = {device: 0 for device in memory}
        self.buffers: dict[Any, int] = {device: 0 for device in memory}
        self.passed_empty: dict[Any, int] = {}

    def layer_reserve(self, excluding: str) -> int:
        """The largest layer still to place, other than ``excluding``: an offloaded layer is
        brought to the main device to run, so that device keeps room for the largest one."""
        rest = [(n, m) for n, m in self.pending if n != excluding]
        size = get_max_layer_size([(n, m) for n, m in rest if isinstance(m, nn.Module)], self.sizes,
                                  list(self.no_split))[0]
        return max([size, *(self.sizes.get(n, 0) for n, m in rest if not isinstance(m, nn.Module))])

    def tied_entries(self, name: str, among: list[tuple[str, Any]]) -> list[str]:
        """Entries of ``among`` holding a parameter tied to one inside ``name``: they go where it goes."""
        names = {n for n, _ in among} - {name}
        entries: list[str] = []
        for group in self.tied_groups:
            inside = [_inside(p, name) for p in group]
            if not any(inside) or all(inside):
                continue
            for member, is_inside in zip(group, inside):
                owner = None if is_inside else _owner(member, names)
                # An entry enclosing ``name`` (a fallback candidate not yet split out) is not a partner.
                if owner is not None and owner not in entries and not _inside(name, owner):
                    entries.append(owner)
        return entries

    def size_with_ties(self, name: str, tied: list[str]) -> int:
        # Sizes count a shared tensor once (under one of its names), so the sum counts it once.
        return self.sizes.get(name, 0) + sum(self.sizes.get(entry, 0) for entry in tied)

    def split(self, name: str) -> None:
        """Replace the pending entry ``name`` by its parameters, children and buffers."""
        index = next(i for i, (n, _) in enumerate(self.pending) if n == name)
        _, module = self.pending[index]
        self.pending[index:index + 1] = _expand(name, module)

    def place(self, names: list[str], device: Any, size: int) -> None:
        for entry in names:
            self.device_map[entry] = device
            self.buffers[device] += self.buffer_sizes.get(entry, 0)
        self.used[device] += size
        placed = set(names)
        self.pending = [(n, m) for n, m in self.pending if n not in placed]
        if self.verbose:
            logger.info("%s (%d bytes) -> %s", ", ".join(names), size, device)

    def fallback(self, device: Any, limit: int) -> bool:
        """Place on ``device`` the first entry still pending (its children searched when it
        is too big) that fits in ``limit`` with what is tied to it."""
        search = list(self.pending[1:])
        while search:
            name, thing = search.pop(0)
            tied = self.tied_entries(name, self.pending)
            size = self.size_with_ties(name, tied)
            if size <= limit:
                # Make the entry itself pending: expand the pending ancestors it lies in.
                while name not in {n for n, _ in self.pending}:
                    self.split(_owner(name, {n for n, _ in self.pending}))
                tied = self.tied_entries(name, self.pending)
                self.place([name, *tied], device, self.size_with_ties(name, tied))
                return True
            if _splittable(thing, self.no_split):
                search[:0] = _expand(name, thing)
        return False

    def run(self, fallback_allocation: bool) -> None:
        devices = list(self.memory)
        platform_devices = [d for d in devices if d not in (HOST, DISK)]
        main_devices = {platform_devices[0], HOST} if platform_devices else {HOST}
        position = 0
        while self.pending and position < len(devices):
            name, thing = self.pending[0]
            device = devices[position]
            tied = self.tied_entries(name, self.pending)
            size = self.sizes.get(name, 0)
            with_ties = self.size_with_ties(name, tied)
            reserve = self.layer_reserve(name) if device in main_devices else 0
            limit = float("inf") if device == DISK else self.memory[device] - reserve
            if self.used[device] + with_ties <= limit:
                self.place([name, *tied], device, with_ties)
                continue
            # The entry fits without what is tied to it: split a tied entry to make the group smaller.
            if tied and self.used[device] + size <= limit:
                splittable = next((t for t in tied if _splittable(dict(self.pending)[t], self.no_split)), None)
                if splittable is not None:
                    self.split(splittable)
                    continue
            elif _splittable(thing, self.no_split):
                self.split(name)
                continue
            if fallback_allocation and self.used[device] == 0 and device != DISK:
                if self.fallback(device, self.memory[device] - max(reserve, with_ties)):
                    continue
            if self.verbose:
                logger.info("%s (%d bytes) does not fit on %s (%d of %s used); next device", name, with_ties, device,
                            self.used[device], limit)
            if self.used[device] == 0:
                self.passed_empty[device] = with_ties + reserve
            # The room kept for the largest layer is used on this device from now on.
            self.used[device] += reserve
            position += 1


def infer_auto_device_map(model: nn.Module, max_memory: dict[int | str, int | str] | None = None,
                          no_split_module_classes: list[str] | None = None, dtype: torch.dtype | str | None = None,
                          special_dtypes: dict[str, Any] | None = None, verbose: bool = False,
                          clean_result: bool = True, offload_buffers: bool = False,
                          fallback_allocation: bool = False) -> dict[str, int | str]:
    """Assign every module of ``model`` to a device within ``max_memory``.

    A plan: the devices are not looked up here, so a map for another machine (``{0: ..., 1: ...}``
    on one without those devices) can be made; it is checked where it is applied.

    Devices are filled in order: platform devices, ``"cpu"``, ``"disk"`` (always available).
    The first platform device and the CPU keep room for the largest layer still to place,
    since offloaded layers are brought there to run. A module that does not fit is split into
    its children unless its class is in ``no_split_module_classes``. Modules holding tied
    parameters go to one device together; when the group does not fit, a tied module is split
    first. ``fallback_allocation`` lets a device that cannot take the next module take one
    later module that fits, rather than stay empty.

    Unless ``offload_buffers``, the buffers of offloaded modules stay on a platform device;
    a ``UserWarning`` says so when no platform device has room left for them.
    """
    memory = get_max_memory(max_memory)
    if DISK not in memory:
        memory[DISK] = float("inf")
    if isinstance(no_split_module_classes, str):
        no_split_module_classes = [no_split_module_classes]
    dtype = as_dtype(dtype)
    sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    buffer_sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes, buffers_only=True)
    plan = _Plan(model, memory, sizes, buffer_sizes, set(no_split_module_classes or []), verbose)
    plan.run(fallback_allocation)
    platform_devices = [d for d in memory if d not in (HOST, DISK)]
    if not offload_buffers:
        _warn_unless_offloaded_buffers_fit(plan, platform_devices)
    for device, needed in plan.passed_empty.items():
        if device in platform_devices:
            # Said, not silent: a device left empty usually means max_memory or the split is wrong.
            logger.warning("device %s was given no module: its %s bytes are insufficient memory for the next module "
                           "and the room kept for the largest layer (%d bytes needed); give it more max_memory, "
                           "split the model more finely (no_split_module_classes) or pass fallback_allocation=True",
                           device, memory[device], needed)
    device_map = plan.device_map
    if clean_result:
        device_map = clean_device_map(device_map)
    return device_map


def _warn_unless_offloaded_buffers_fit(plan: _Plan, platform_devices: list[Any]) -> None:
    """Buffers of offloaded modules are not offloaded: they are kept on a platform device
    while the model runs. Warn when none has that much room left."""
    needed = plan.buffers.get(HOST, 0) + plan.buffers.get(DISK, 0)
    if not needed or not platform_devices:
        return
    if any(plan.memory[device] >= plan.used[device] + needed for device in platform_devices):
        return
    warnings.warn(f"the offloaded modules' buffers ({needed} bytes) stay on the main device, and no device has that "
                  "much memory left in max_memory; pass offload_buffers=True to offload them with their modules, "
                  "or give the devices more max_memory", UserWarning, stacklevel=3)


def _unknown_keys(model: nn.Module, device_map: Any) -> list[str]:
    """Keys of ``device_map`` (a dict, refused otherwise) that name no module, parameter or buffer of ``model``."""
    if not isinstance(device_map, dict):
        raise ConfigError(f"device_map is a {type(device_map).__name__}; give a dict {{'module.name': device}} or "
                          f"one of {', '.join(STRATEGIES)}")
    known = {""} | {name for name, _ in model.named_modules()}
    known.update(name for name, _ in model.named_parameters(remove_duplicate=False))
    known.update(name for name, _ in model.named_buffers(remove_duplicate=False))
    return [name for name in device_map if name not in known]


def _check_keys(model: nn.Module, device_map: Any) -> None:
    """Refuse a map that is not a dict; warn about keys that name nothing in ``model``."""
    unknown = _unknown_keys(model, device_map)
    if unknown:
        # A warning where a map is planned, as in Accelerate's check_device_map (one map may be
        # written for variants of a model); where it is applied, refuse_unknown_keys refuses.
        # Warned from this one line, so Python's filter says it once per map.
        warnings.warn(f"device_map keys do not match any submodules in the model: {unknown}; names come from "
                      f"{type(model).__name__}.named_modules()", UserWarning, stacklevel=2)


def refuse_unknown_keys(model: nn.Module, device_map: Any) -> None:
    """Refuse, where a map is applied to ``model``, a key that names nothing in it: a misspelt
    or stale name would place nothing, and the module meant stays where it was."""
    unknown = _unknown_keys(model, device_map)
    if not unknown:
        return
    name = unknown[0]
    hint = suggest(name, (module for module, _ in model.named_modules() if module))
    more = f" (and {len(unknown) - 1} more key(s) naming nothing)" if len(unknown) > 1 else ""
    raise ConfigError(f"device_map names {name!r}{hint}, which {type(model).__name__} has no module, parameter or "
                      f"buffer of{more}: use names from model.named_modules(), or remove the key")


def check_devices_exist(device_map: dict[str, Any]) -> None:
    """Fail, before anything is placed, when ``device_map`` names a device this machine does
    not have (:func:`check_device`). Asked where a map is applied, not where it is planned."""
    for name, device in device_map.items():
        check_device(device, f"the device map (entry {name!r})")


def validate_device_map(model: nn.Module, device_map: dict[str, Any]) -> None:
    """The checks of a map about to be applied here: a dict, keys that name parts of
    ``model`` (:func:`refuse_unknown_keys`), devices that exist (:func:`check_devices_exist`)."""
    refuse_unknown_keys(model, device_map)
    check_devices_exist(device_map)


def check_device_map(model: nn.Module, device_map: dict[str, Any]) -> None:
    """Fail (``ConfigError``, a ``ValueError``) when ``device_map`` leaves some parameter or
    buffer of ``model`` without a device; warn about keys that name nothing in ``model``.

    A planning check, as Accelerate's: the devices are not looked up, since a map may be
    written for another machine (:func:`check_devices_exist` is asked where it is applied).
    """
    _check_keys(model, device_map)
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
__getattr__ = surface_getattr("drivetrain.utils.device_map")
