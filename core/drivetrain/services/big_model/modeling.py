"""Helpers on a model's tensors: sizes, placement of one tensor, tied weights, devices.

These are Accelerate's ``utils.modeling`` names. Device maps (``infer_auto_device_map``) live
in :mod:`.device_map` and checkpoint loading in :mod:`.weights_loading`; both are re-exported
here so ``from drivetrain.utils.modeling import ...`` finds every name.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections import defaultdict
from typing import Any, Iterator

import torch
from torch import nn

from ..checkpointing.dtypes import TORCH_DTYPES
from ...kernel.errors import ConfigError
from ...kernel.contributed import surface_getattr

logger = logging.getLogger("drivetrain.utils.modeling")  # its name before the layers, kept for log filters

# Kinds of place a device map may name besides the platform's devices (given by index).
HOST = "cpu"
DISK = "disk"
META = "meta"


# Longest suffixes first: "GiB" before "B". A lower-case "b" after a decimal prefix means bits.
_SIZE_SUFFIXES = [(f"{p}iB", 2 ** (10 * n)) for n, p in enumerate("KMGT", 1)] + \
    [(f"{p}B", 10 ** (3 * n)) for n, p in enumerate("KMGT", 1)] + [("B", 1)]


def _size_in_bytes(size: int | str) -> int:
    """A size as bytes, negative ones included (each caller says why a negative one is wrong)."""
    if isinstance(size, int):
        return size
    text = str(size).strip()
    for suffix, factor in _SIZE_SUFFIXES:
        if text.upper().endswith(suffix.upper()):
            try:
                number = float(text[: -len(suffix)]) * factor
            except ValueError:
                break
            bits = text.endswith("b") and not suffix.endswith("iB")
            return int(number / 8 if bits else number)
    raise ConfigError(f"cannot read the size {size!r}; write it like '10GB', '500MiB' or a number of bytes")


def convert_file_size_to_int(size: int | str) -> int:
    """``"10GB"`` -> 10_000_000_000, ``"1GiB"`` -> 2**30, ``"5Mb"`` (bits) -> 625_000; ints pass."""
    number = _size_in_bytes(size)
    if number < 0:
        raise ConfigError(f"the size {size!r} is negative; give a size of 0 or more, like '10GB'")
    return number




def _packed_bits(dtype: str) -> int | None:
    """Bits per element of a weight type torch has no dtype for (``"int4"`` -> 4), else ``None``."""
    name = str(dtype).lower().removeprefix("torch.")
    digits = name.lstrip("abcdefghijklmnopqrstuvwxyz_")
    if not digits.isdigit():
        return None
    # Sub-byte types (torch.int4 exists but is not a usable element type); others are torch's.
    return int(digits) if int(digits) < 8 or not isinstance(getattr(torch, name, None), torch.dtype) else None


def dtype_byte_size(dtype: torch.dtype | str) -> float:
    """Bytes one element of ``dtype`` takes (``0.5`` for int4, ``0.125`` for bool-as-bit)."""
    if dtype == torch.bool:
        return 1 / 8
    if isinstance(dtype, str) and _packed_bits(dtype):  # CustomDtype values: "int4" is 4 bits
        return _packed_bits(dtype) / 8
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.removeprefix("torch."))
    if dtype.is_floating_point or dtype.is_complex:
        return torch.finfo(dtype).bits / 8
    return torch.iinfo(dtype).bits / 8


def as_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """``"float16"`` / ``"torch.float16"`` -> ``torch.float16``; ``None`` passes."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    value = TORCH_DTYPES.get(str(dtype).removeprefix("torch."))
    if value is None:
        raise ConfigError(f"unknown dtype {dtype!r}; use a torch dtype such as torch.float16")
    return value


def id_tensor_storage(tensor: torch.Tensor) -> tuple[torch.device, int, int]:
    """An identifier of the memory a tensor lives in: tensors sharing storage share it."""
    if tensor.device.type == META:
        return tensor.device, id(tensor), 0
    storage = tensor.untyped_storage()
    return tensor.device, storage.data_ptr(), storage.nbytes()


def named_module_tensors(module: nn.Module, include_buffers: bool = True, recurse: bool = False,
                         remove_non_persistent: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
    """A module's parameters, and its buffers (optionally only the persistent ones)."""
    yield from module.named_parameters(recurse=recurse)
    if include_buffers:
        non_persistent: set[str] = set()
        if remove_non_persistent:
            for prefix, sub in (module.named_modules() if recurse else [("", module)]):
                non_persistent.update(f"{prefix}.{name}" if prefix else name for name in sub._non_persistent_buffers_set)
        for name, buffer in module.named_buffers(recurse=recurse):
            if name not in non_persistent:
                yield name, buffer


def get_non_persistent_buffers(module: nn.Module, recurse: bool = False) -> set[str]:
    """Names of the buffers a state dict leaves out, as their modules know them (no prefix).

    With ``recurse`` the submodules' names are added to the set (Accelerate's meaning: a set of
    buffer names, not of paths). A new set every time: the modules' own sets are never changed.
    """
    names = set(module._non_persistent_buffers_set)
    if recurse:
        for sub in module.modules():
            names.update(sub._non_persistent_buffers_set)
    return names


def resolve_device(device: int | str | torch.device) -> torch.device:
    """A device-map value as a ``torch.device``: an integer is a device of the platform."""
    if isinstance(device, torch.device):
        return device
    if isinstance(device, int) or (isinstance(device, str) and device.isdigit()):
        return torch.device(current_platform().device_type, int(device))
    return torch.device(device)


def check_device(device: Any, where: str = "the device map") -> None:
    """Fail unless ``device`` exists here: ``"cpu"``, ``"disk"``, ``"meta"``, or a device of this
    process's platform (an index below its device count, or ``"<type>:<index>"`` of its type).

    Asked of the platform, so the core names no backend; raises ``ConfigError`` (a
    ``ValueError``) before anything is loaded.
    """
    if isinstance(device, str) and device in (HOST, DISK, META):
        return
    platform = current_platform()
    own = platform.device_type
    if isinstance(device, bool) or not isinstance(device, (int, str, torch.device)):
        raise ConfigError(f"{where} names {device!r}, which is not a device; use a device index, '{own}:N', "
                          f"'{HOST}' or '{DISK}'")
    if isinstance(device, int) or (isinstance(device, str) and device.isdigit()):
        kind, index = own, int(device)
    else:
        try:
            parsed = torch.device(device)
        except (RuntimeError, ValueError):
            raise ConfigError(f"{where} names {device!r}, which is not a device; use a device index, '{own}:N', "
                              f"'{HOST}' or '{DISK}'") from None
        if parsed.type in (HOST, META):
            return
        kind, index = parsed.type, parsed.index or 0
    count = platform.device_count() if own != HOST else 0
    if kind != own or not 0 <= index < count:
        have = f"{count} {own} device(s) (0 to {count - 1})" if count else f"no devices besides '{HOST}'"
        raise ConfigError(f"{where} names device {device!r}, which does not exist: this machine's platform "
                          f"({platform.name}) has {have}; map to an existing device, '{HOST}' or '{DISK}'")


def current_platform() -> Any:
    """The platform of this process: the one ``PartialState`` uses, else detected (nothing started)."""
    from ...runtime.state import PartialState

    platform = PartialState._shared_state.get("platform")
    return platform if platform is not None else _detected_platform()


@functools.lru_cache(maxsize=1)
def _detected_platform() -> Any:
    from ...kernel.plugin_manager import get_plugin_manager
    from ...selection.choice import requests_from_env, select

    manager = get_plugin_manager()
    selection = select(manager, requests_from_env(manager))
    return manager.resolve_factory(selection.platform_plugin, selection.platform,
                                   f"platform {selection.platform.name!r}")()


def set_module_tensor_to_device(module: nn.Module, tensor_name: str, device: int | str | torch.device,
                                value: torch.Tensor | None = None, dtype: torch.dtype | str | None = None,
                                fp16_statistics: torch.Tensor | None = None,
                                tied_params_map: dict[int, dict[torch.device, torch.Tensor]] | None = None,
                                non_blocking: bool = False, clear_cache: bool = True) -> None:
    """Put one parameter or buffer of ``module`` (dotted name) on ``device``, with ``value``.

    The tensor keeps its parameter class and ``requires_grad``. ``value`` is cast to
    ``dtype`` when given, else to the current tensor's dtype (floating-point values only).
    """
    if "." in tensor_name:
        owner_name, _, tensor_name = tensor_name.rpartition(".")
        module = module.get_submodule(owner_name)
    if tensor_name not in module._parameters and tensor_name not in module._buffers:
        raise ValueError(f"{module.__class__.__name__} has no parameter or buffer named {tensor_name!r}")
    is_buffer = tensor_name in module._buffers
    old = module._buffers[tensor_name] if is_buffer else module._parameters[tensor_name]
    device = resolve_device(device) if not (isinstance(device, str) and device == DISK) else torch.device(META)
    if old is None:
        if value is None:
            return
        old = value
    if old.device.type == META and value is None and device.type != META:
        raise ValueError(f"{tensor_name} is on the meta device: give a value to put it on {device}")
    dtype = as_dtype(dtype)

    if tied_params_map is not None and value is not None and value.device.type != META:
        tied = tied_params_map.get(value.data_ptr(), {}).get(device)
        if tied is not None:
            module._parameters[tensor_name] = tied  # the tied copy already on this device
            return

    # A value of another shape is a wrong checkpoint; quantized parameter classes store packed
    # data of their own shape, so only plain tensors and parameters are held to it.
    if value is not None and value is not old and value.shape != old.shape \
            and type(old) in (torch.Tensor, nn.Parameter):
        raise ConfigError(f"Trying to set a tensor of shape {value.shape} in \"{tensor_name}\" (which has shape "
                          f"{old.shape}), this looks incorrect.")
    source = old if value is None else value
    if value is not None:
        if dtype is not None and source.is_floating_point():
            source = source.to(dtype)
        elif dtype is None and source.is_floating_point() and old.is_floating_point() and old.dtype != source.dtype:
            source = source.to(old.dtype)
    elif dtype is not None and source.is_floating_point():
        source = source.to(dtype)
    if device.type == META:
        new = torch.empty(source.shape, dtype=source.dtype, device=META)  # empty_like on meta imports sympy
    elif value is not None and old.device.type != META and old.device == device and old.shape == source.shape \
            and old.dtype == source.dtype and not is_buffer:
        with torch.no_grad():
            old.copy_(source, non_blocking=non_blocking)
        new = old
    else:
        new = source.to(device, non_blocking=non_blocking)
    if new is not old:
        if is_buffer:
            module._buffers[tensor_name] = new
        else:
            param_class = type(module._parameters[tensor_name]) if module._parameters[tensor_name] is not None \
                else nn.Parameter
            if param_class is not nn.Parameter and hasattr(param_class, "__new__"):
                try:
                    new = param_class(new, requires_grad=old.requires_grad, **getattr(old, "__dict__", {}))
                except TypeError:
                    new = nn.Parameter(new, requires_grad=old.requires_grad)
            else:
                new = nn.Parameter(new, requires_grad=old.requires_grad and new.is_floating_point())
            module._parameters[tensor_name] = new
    if tied_params_map is not None and value is not None and value.device.type != META \
            and value.data_ptr() in tied_params_map:
        tied_params_map[value.data_ptr()][device] = module._parameters.get(tensor_name)


def compute_module_sizes(model: nn.Module, dtype: torch.dtype | str | None = None,
                         special_dtypes: dict[str, torch.dtype | str] | None = None,
                         buffers_only: bool = False) -> dict[str, int]:
    """Bytes of every module and sub-module of ``model`` (``""`` is the whole model).

    ``dtype`` is the dtype weights will be loaded in (floating-point tensors only, and never
    to a larger size); ``special_dtypes`` overrides it per tensor name.
    """
    dtype = as_dtype(dtype)
    special = {name: value if isinstance(value, str) and _packed_bits(value) else as_dtype(value)
               for name, value in (special_dtypes or {}).items()}
    sizes: dict[str, int] = defaultdict(int)
    tensors = model.named_buffers(recurse=True) if buffers_only else named_module_tensors(model, recurse=True)
    for name, tensor in tensors:
        if name in special:
            size = tensor.numel() * dtype_byte_size(special[name])
        elif dtype is None or not tensor.is_floating_point():
            size = tensor.numel() * tensor.element_size()
        else:
            size = tensor.numel() * min(dtype_byte_size(dtype), tensor.element_size())
        size = int(size)
        # Add the size to the tensor and every enclosing module: "a.b.weight" counts for
        # "", "a", "a.b" and itself (a tensor placed on its own, such as a module's direct
        # parameter, is then budgeted at its size).
        parts = name.split(".")
        sizes[""] += size
        for end in range(1, len(parts) + 1):
            sizes[".".join(parts[:end])] += size
    return dict(sizes)


def compute_module_total_buffer_size(model: nn.Module, dtype: torch.dtype | str | None = None,
                                     special_dtypes: dict[str, Any] | None = None) -> int:
    """Bytes of all buffers of ``model``."""
    return compute_module_sizes(model, dtype, special_dtypes, buffers_only=True).get("", 0)


def get_max_layer_size(modules: list[tuple[str, nn.Module]], module_sizes: dict[str, int],
                       no_split_module_classes: list[str]) -> tuple[int, list[str]]:
    """The largest "layer" among ``modules`` and the names of the layers of that size.

    A layer is a module without children, or one whose class is in
    ``no_split_module_classes`` (it must stay on one device).
    """
    max_size, names = 0, []
    stack = list(modules)
    while stack:
        name, module = stack.pop(0)
        children = list(module.named_children())
        if not children or module.__class__.__name__ in no_split_module_classes:
            size = module_sizes.get(name, 0)
            if size > max_size:
                max_size, names = size, [name]
            elif size == max_size:
                names.append(name)
        else:
            stack = [(f"{name}.{child}" if name else child, sub) for child, sub in children] + stack
    return max_size, names


def get_module_size_with_ties(tied_params: list[str], module_size: int, module_sizes: dict[str, int],
                              modules_to_treat: list[tuple[str, nn.Module]]
                              ) -> tuple[int, list[str], list[nn.Module]]:
    """The bytes a module takes once the modules that hold its tied parameters come with it.

    ``tied_params`` are the parameters tied to the module being placed; each one's owner among
    ``modules_to_treat`` (the module whose name, plus a dot, starts the parameter's name, so
    ``"1"`` never owns ``"10.weight"``) adds its size less the tied tensors, which are counted
    once already. Returns that total and the owners' names and modules, in the order of
    ``tied_params``; a parameter no pending module owns adds nothing.
    """
    owners: dict[str, tuple[nn.Module, list[str]]] = {}
    for param in tied_params:
        for name, module in modules_to_treat:
            if param.startswith(f"{name}."):
                owners.setdefault(name, (module, []))[1].append(param)
                break
    total = module_size
    for name, (_, params) in owners.items():
        total += module_sizes.get(name, 0) - sum(module_sizes.get(p, 0) for p in params)
    return total, list(owners), [module for module, _ in owners.values()]


def calculate_maximum_sizes(model: nn.Module) -> tuple[int, tuple[int, list[str]]]:
    """Total bytes of ``model`` and its largest layer (size, names)."""
    sizes = compute_module_sizes(model)
    no_split = getattr(model, "_no_split_modules", None) or []
    modules = list(model.named_children())
    return sizes.get("", 0), get_max_layer_size(modules, sizes, no_split)


def find_tied_parameters(model: nn.Module, **_ignored: Any) -> list[list[str]]:
    """Groups of parameter names that are the same tensor (tied weights), each group sorted."""
    by_identity: dict[int, list[str]] = defaultdict(list)
    for name, param in model.named_parameters(remove_duplicate=False):
        by_identity[id(param)].append(name)
    return sorted(sorted(names) for names in by_identity.values() if len(names) > 1)


def retie_parameters(model: nn.Module, tied_params: list[list[str]]) -> None:
    """Make every name of each group point to one parameter again: the first that holds
    values (not on the meta device), else the first."""
    for group in tied_params:
        members = [model.get_parameter(name) for name in group]
        source = next((p for p in members if p.device.type != META), members[0])
        for name in group:
            owner, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(owner) if owner else model, attribute, source)


def ensure_weights_retied(param_init_fn: Any, model: nn.Module, device: Any) -> Any:
    """Wrap ``param_init_fn`` (a per-module initialiser, as sharding wrappers take) so that
    tied parameters are tied again after it ran."""
    tied = find_tied_parameters(model)
    if not tied:
        return param_init_fn

    def init_then_retie(module: nn.Module) -> Any:
        result = param_init_fn(module)
        retie_parameters(model, tied)
        return result

    return init_then_retie


def check_tied_parameters_in_config(model: nn.Module) -> bool:
    """Whether a transformers model's config asks for tied weights."""
    config = getattr(model, "config", None)
    if config is None:
        return False
    return bool(getattr(config, "tie_word_embeddings", False) or getattr(config, "tie_encoder_decoder", False))


def _device_of(name: str, device_map: dict[str, Any]) -> Any:
    """The device a device map gives to tensor/module ``name`` (its longest listed prefix)."""
    probe = name
    while True:
        if probe in device_map:
            return device_map[probe]
        if not probe:
            raise KeyError(name)
        probe = probe.rpartition(".")[0]


def check_tied_parameters_on_same_device(tied_params: list[list[str]], device_map: dict[str, Any]) -> None:
    """Warn when the parameters of a tied group are mapped to different devices."""
    for group in tied_params:
        devices = {str(_device_of(name, device_map)) for name in group}
        if len(devices) > 1:
            logger.warning("tied parameters %s are on different devices %s; they will be untied", group,
                           sorted(devices))


def get_max_memory(max_memory: dict[int | str, int | str] | None = None) -> dict[int | str, int]:
    """Memory each device may use: the platform's free memory per device index, ``"cpu"``
    (available host memory) and, when asked, ``"disk"``. Given a mapping, sizes written as
    strings are converted and devices sorted: platform devices first, then cpu, then disk.

    Sizes written as strings are converted in the caller's mapping too, as Accelerate does:
    transformers' ``get_max_memory`` compares the caller's values with the result afterwards.
    """
    import psutil

    if max_memory is None:
        platform = current_platform()
        result: dict[int | str, int] = {}
        free = getattr(platform, "free_memory", None)
        for index in range(platform.device_count() if free is not None else 0):
            amount = free(index)
            if amount is None:
                break
            result[index] = int(amount)
        result[HOST] = psutil.virtual_memory().available
        return result
    result = {key: _size_in_bytes(value) for key, value in max_memory.items()}
    for key, value in result.items():
        if isinstance(max_memory, dict) and isinstance(max_memory[key], str) and value >= 0:
            max_memory[key] = value
        if value < 0:
            raise ConfigError(f"max_memory gives {key!r} {max_memory[key]!r}, a negative size; give each device "
                              "the memory it may use ('10GiB', 0 for none)")
        # A bare ordinal may plan for devices elsewhere (prepare_pippy plans one stage per
        # process); the device map that is then loaded or dispatched is checked against this machine.
        if key != DISK and not isinstance(key, int):
            check_device(key, "max_memory")
    unknown = [key for key in result if not isinstance(key, int) and key not in (HOST, DISK)
               and not str(key).isdigit()]
    for key in unknown:
        result[torch.device(key).index or 0] = result.pop(key)  # "<type>:N" -> N
    devices = sorted(k for k in result if isinstance(k, int)) + [k for k in (HOST, DISK) if k in result]
    return {key: result[key] for key in devices}


def align_module_device(module: nn.Module, execution_device: torch.device | str | None = None):
    """Context manager: ``module``'s own weights on ``execution_device`` (or loaded from its
    offload hook) for the duration, put back afterwards."""
    return _AlignModuleDevice(module, execution_device)


class _AlignModuleDevice(contextlib.ContextDecorator):
    def __init__(self, module: nn.Module, execution_device: Any) -> None:
        self.module, self.execution_device, self.saved = module, execution_device, {}

    def __enter__(self) -> None:
        hook = getattr(self.module, "_hf_hook", None)
        if has_offloaded_params(self.module):
            if self.execution_device is not None:
                self.saved_device = hook.execution_device
                hook.execution_device = self.execution_device
            hook.pre_forward(self.module)
            self.onloaded = True
        elif self.execution_device is not None:
            for name, tensor in named_module_tensors(self.module):
                self.saved[name] = tensor.device
                set_module_tensor_to_device(self.module, name, self.execution_device)

    def __exit__(self, *exc: Any) -> None:
        if getattr(self, "onloaded", False):
            hook = self.module._hf_hook
            hook.post_forward(self.module, None)
            if self.execution_device is not None:
                hook.execution_device = self.saved_device
        for name, device in self.saved.items():
            set_module_tensor_to_device(self.module, name, device)


def has_offloaded_params(module: nn.Module) -> bool:
    """Whether ``module`` has an offload hook that loads its weights at each forward."""
    hook = getattr(module, "_hf_hook", None)
    return getattr(type(hook), "loads_weights_at_forward", False) is True and bool(hook.offload)


def get_state_dict_offloaded_model(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full state dict of a model with offloaded parts, on the CPU (one module loaded at a time)."""
    state: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        if name and module is model:
            continue
        own = dict(named_module_tensors(module, remove_non_persistent=True))
        if not own:
            continue
        with align_module_device(module, HOST):
            for key in own:
                tensor = module._parameters.get(key) if key in module._parameters else module._buffers.get(key)
                if tensor is not None:
                    state[f"{name}.{key}" if name else key] = tensor.detach().to(HOST).clone()
    return state


def get_state_dict_from_offload(module: nn.Module, module_name: str, state_dict: dict[str, torch.Tensor],
                                device_to_put_offload: int | str | torch.device = HOST) -> dict[str, torch.Tensor]:
    """Add ``module``'s weights (loaded from its offload hook when offloaded) to ``state_dict``."""
    with align_module_device(module, device_to_put_offload):
        for name, tensor in module.state_dict().items():
            state_dict[f"{module_name}.{name}" if module_name else name] = tensor.to(device_to_put_offload)
    return state_dict


def clean_device_map(device_map: dict[str, Any], module_name: str = "") -> dict[str, Any]:
    """Merge entries whose children all share one device into their parent's entry."""
    prefix = f"{module_name}." if module_name else ""
    values = [v for k, v in device_map.items() if k == module_name or k.startswith(prefix)]
    if len(set(map(str, values))) == 1 and len(values) > 1:
        for key in [k for k in device_map if k.startswith(prefix)]:
            del device_map[key]
        device_map[module_name] = values[0]
    children = {k[len(prefix):].split(".")[0] for k in device_map if k.startswith(prefix) and k != module_name}
    for child in children:
        clean_device_map(device_map, f"{prefix}{child}")
    return device_map


# Names of the device-map and loading halves, resolved lazily (they import this module).
_ELSEWHERE = {
    "infer_auto_device_map": "device_map", "get_balanced_memory": "device_map", "check_device_map": "device_map",
    "load_state_dict": "weights_loading", "load_checkpoint_in_model": "weights_loading",
    "load_offloaded_weights": "offload", "offload_state_dict": "offload", "offload_weight": "offload",
    "load_offloaded_weight": "offload", "save_offload_index": "offload", "PrefixedDataset": "offload",
    "OffloadedWeightsLoader": "offload", "extract_submodules_state_dict": "offload",
}


# Accelerate's names of this module defined elsewhere, then a plugin's ("utils.modeling.<name>")
__getattr__ = surface_getattr("drivetrain.utils.modeling",
                              lazy={name: f"{__package__}.{module}:{name}" for name, module in _ELSEWHERE.items()})





def get_mixed_precision_context_manager(native_amp: bool = False, autocast_kwargs: Any = None) -> Any:
    """``torch.autocast`` on this process's device in the run's half precision (fp16 / bf16)
    when ``native_amp``, else a context that does nothing."""
    from ...runtime.state import PartialState

    if not native_amp:
        return contextlib.nullcontext()
    state = PartialState()
    precision = str(getattr(state, "mixed_precision", "no"))
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    kwargs = autocast_kwargs.to_kwargs() if autocast_kwargs is not None else {}
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=state.device.type, dtype=dtype, **kwargs)


def get_grad_scaler(distributed_type: Any = None, **kwargs: Any) -> Any:
    """A ``torch.amp.GradScaler`` for this process's device (``kwargs`` as GradScaler takes)."""
    from ...runtime.state import PartialState

    return torch.amp.GradScaler(PartialState().device.type, **kwargs)
