"""Big-model inference: build a model without memory, load it across devices, CPU and disk.

``init_empty_weights`` builds the skeleton on the meta device; ``load_checkpoint_and_dispatch``
reads the checkpoint shard by shard into the places a device map gives and attaches the
hooks (:mod:`drivetrain.hooks`) that bring offloaded weights to the execution device for each
forward. ``cpu_offload`` and ``disk_offload`` do the same for a model already in memory.
A device is a platform device index, ``"cpu"`` or ``"disk"``; the core names no device type.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from ...kernel.environment import read_bool
from ...kernel.errors import ConfigError
from .module_hooks import (
    AlignDevicesHook,
    TiedParamsMap,
    CpuOffload,
    SequentialHook,
    UserCpuOffloadHook,
    add_hook_to_module,
    attach_align_device_hook,
    attach_align_device_hook_on_blocks,
    attach_layerwise_casting_hooks,
)
from .device_map import check_device_map, check_devices_exist, refuse_unknown_keys, resolve_device_map
from .modeling import DISK, HOST, current_platform, find_tied_parameters, resolve_device, retie_parameters
from .offload import INDEX_NAME, OffloadedWeightsLoader, extract_submodules_state_dict, offload_state_dict
from .offload import save_offload_index
from .streaming import WeightStreamer
from .weights_loading import load_checkpoint_to_offload_index

logger = logging.getLogger("drivetrain.big_modeling")  # its name before the layers, kept for log filters

__all__ = [
    "init_empty_weights", "init_on_device", "cpu_offload", "cpu_offload_with_hook", "disk_offload", "dispatch_model",
    "load_checkpoint_and_dispatch", "attach_layerwise_casting_hooks",
]


# Layer types (a model config's ``layer_types``) that carry a state from one token to the next:
# split along the sequence across processes, each shard would start from an empty state.
RECURRENT_LAYER_TYPES = frozenset({"linear_attention", "mamba", "mamba2", "conv", "recurrent", "rwkv", "ssm"})


def _refuse_recurrent_layers_under_sequence_parallelism(model: Any) -> None:
    """Raise :class:`ConfigError` if ``model`` has layers that sequence parallelism would break.

    Reads ``model.config`` (its text config where it has one); a model without ``layer_types``
    passes.
    """
    config = getattr(model, "config", None)
    if config is not None and callable(getattr(config, "get_text_config", None)):
        config = config.get_text_config()
    recurrent = sorted(set(getattr(config, "layer_types", None) or ()) & RECURRENT_LAYER_TYPES)
    if recurrent:
        raise ConfigError(f"{type(model).__name__} has layers of type {', '.join(recurrent)}, which carry a state "
                          "along the sequence: sequence parallelism would split that state; train it without "
                          "sequence parallelism")


@contextlib.contextmanager
def init_empty_weights(include_buffers: bool | None = None) -> Iterator[None]:
    """Build models inside this block without allocating their parameters (meta device).

    With ``include_buffers`` (default: ``DRIVETRAIN_INIT_INCLUDE_BUFFERS`` /
    ``ACCELERATE_INIT_INCLUDE_BUFFERS``, else false) buffers and every tensor created in the
    block go to the meta device too; otherwise buffers keep real values (rotary tables,
    position ids), which loading does not always restore.
    """
    if include_buffers is None:
        include_buffers = read_bool("INIT_INCLUDE_BUFFERS")
    with init_on_device(torch.device("meta"), include_buffers=include_buffers):
        yield


@contextlib.contextmanager
def init_on_device(device: torch.device | str | int, include_buffers: bool | None = None) -> Iterator[None]:
    """Create every parameter built inside this block on ``device`` (buffers too with
    ``include_buffers``; then tensors created by constructors land there directly)."""
    if include_buffers is None:
        include_buffers = read_bool("INIT_INCLUDE_BUFFERS")
    device = resolve_device(device)
    original_parameter = nn.Module.register_parameter

    def register_parameter(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original_parameter(module, name, param)
        if param is not None and param.device != device:
            registered = module._parameters[name]
            extra = dict(getattr(registered, "__dict__", {}))
            moved = registered.detach().to(device)
            try:
                module._parameters[name] = type(registered)(moved, requires_grad=registered.requires_grad, **extra)
            except TypeError:
                module._parameters[name] = nn.Parameter(moved, requires_grad=registered.requires_grad)

    if include_buffers:
        # Every tensor goes to the device: torch's default-device context puts whatever
        # constructors create (torch.empty, torch.zeros) there directly, so nothing is allocated
        # even transiently, and nn.Module is left unpatched (code that compares its methods,
        # or patches them itself, sees torch's own).
        with device:
            yield
        return
    nn.Module.register_parameter = register_parameter
    try:
        yield
    finally:
        nn.Module.register_parameter = original_parameter


def _first_device(model: nn.Module) -> torch.device:
    for tensor in model.parameters():
        if tensor.device.type != "meta":
            return tensor.device
    platform = current_platform()
    return platform.device_for(0) if getattr(platform, "free_memory", None) and platform.device_count() \
        else torch.device(HOST)


def cpu_offload(model: nn.Module, execution_device: Any = None, offload_buffers: bool = False,
                state_dict: dict[str, torch.Tensor] | None = None,
                preload_module_classes: list[str] | None = None) -> nn.Module:
    """Keep ``model``'s weights in CPU memory and bring each module's to ``execution_device``
    for its forward only (the model then needs one module's weights on the device)."""
    execution_device = _first_device(model) if execution_device is None else resolve_device(execution_device)
    if state_dict is None:
        state_dict = {name: tensor.detach().to(HOST) for name, tensor in model.state_dict(keep_vars=True).items()}
    tied = TiedParamsMap.for_model(model)
    add_hook_to_module(model, AlignDevicesHook(io_same_device=True, tied_params_map=tied), append=True)
    attach_align_device_hook(model, execution_device, offload=True, weights_map=state_dict,
                             offload_buffers=offload_buffers, preload_module_classes=preload_module_classes,
                             tied_params_map=tied)
    stream_offloaded_weights(model)
    return model


def stream_offloaded_weights(model: nn.Module) -> WeightStreamer | None:
    """Give every offloading hook of ``model`` one shared :class:`WeightStreamer`, so that the
    weights of the next modules are read while one runs, within a window the size of the
    largest offloaded module. Returns it (``None`` when nothing is offloaded)."""
    hooks = []
    for module in model.modules():
        hook = getattr(module, "_hf_hook", None)
        for part in hook.hooks if isinstance(hook, SequentialHook) else [hook]:
            if isinstance(part, AlignDevicesHook) and part.offload and part.streamed is not None:
                hooks.append(part)
    if not hooks:
        return None
    streamer = WeightStreamer()
    for hook in hooks:
        hook.use_streamer(streamer)
    streamer.fit_window_to_largest()
    return streamer


def cpu_offload_with_hook(model: nn.Module, execution_device: Any = None,
                          prev_module_hook: UserCpuOffloadHook | None = None) -> tuple[nn.Module, UserCpuOffloadHook]:
    """Keep the whole ``model`` on the CPU until its forward moves it to ``execution_device``,
    where it stays until the next model of the pipeline (given this hook as
    ``prev_module_hook``) runs, or ``hook.offload()`` is called."""
    hook = CpuOffload(execution_device=execution_device, prev_module_hook=prev_module_hook)
    add_hook_to_module(model, hook, append=True)
    return model, UserCpuOffloadHook(model, hook)


def disk_offload(model: nn.Module, offload_dir: str | os.PathLike, execution_device: Any = None,
                 offload_buffers: bool = False, preload_module_classes: list[str] | None = None) -> nn.Module:
    """Write ``model``'s weights to ``offload_dir`` (unless it already holds them) and read each
    module's back, through a memory map, for its forward only."""
    execution_device = _first_device(model) if execution_device is None else resolve_device(execution_device)
    if not (Path(offload_dir) / INDEX_NAME).exists():
        offload_state_dict(offload_dir, model.state_dict())
    tied = TiedParamsMap.for_model(model)
    add_hook_to_module(model, AlignDevicesHook(io_same_device=True, tied_params_map=tied), append=True)
    attach_align_device_hook(model, execution_device, offload=True, weights_map=OffloadedWeightsLoader(save_folder=offload_dir),
                             offload_buffers=offload_buffers, preload_module_classes=preload_module_classes,
                             tied_params_map=tied)
    stream_offloaded_weights(model)
    return model


def dispatch_model(model: nn.Module, device_map: dict[str, Any], main_device: Any = None,
                   state_dict: dict[str, torch.Tensor] | None = None, offload_dir: str | os.PathLike | None = None,
                   offload_index: dict[str, Any] | None = None, offload_buffers: bool = False,
                   skip_keys: str | list[str] | None = None, preload_module_classes: list[str] | None = None,
                   force_hooks: bool = False) -> nn.Module:
    """Place ``model`` as ``device_map`` says and attach the hooks that run it there.

    Modules mapped to ``"disk"`` (and to ``"cpu"`` when the main device is an accelerator)
    are offloaded: their weights are read from ``offload_index`` / ``offload_dir`` or
    ``state_dict`` for each forward and run on ``main_device``. A map with one device and no
    offload just moves the model (no hooks, unless ``force_hooks``).
    """
    refuse_unknown_keys(model, device_map)
    check_device_map(model, device_map)
    check_devices_exist(device_map)
    places = list(dict.fromkeys(map(_place_key, device_map.values())))
    model.hf_device_map = dict(device_map)
    if len(places) == 1 and places[0] != DISK and not force_hooks:
        device = resolve_device(next(iter(device_map.values())))
        tied = find_tied_parameters(model)
        model.to(device)
        retie_parameters(model, tied)
        return model

    if main_device is None:
        platform_devices = [d for d in device_map.values() if _place_key(d) not in (HOST, DISK)]
        main_device = platform_devices[0] if platform_devices else HOST
    main_is_host = _place_key(main_device) == HOST
    offloaded_places = {DISK} if main_is_host else {DISK, HOST}
    if not main_is_host:
        cpu_modules = [name for name, device in device_map.items() if _place_key(device) == HOST]
        if state_dict is None and cpu_modules:
            state_dict = extract_submodules_state_dict(model.state_dict(), cpu_modules)
    disk_modules = [name for name, device in device_map.items() if _place_key(device) == DISK]
    if disk_modules and offload_index is None:
        if offload_dir is None:
            raise ConfigError("the device map sends modules to disk: pass offload_dir (a folder for their weights)")
        if not (Path(offload_dir) / INDEX_NAME).exists():
            disk_state = extract_submodules_state_dict(model.state_dict(), disk_modules)
            if any(t.device.type == "meta" for t in disk_state.values()):
                raise ConfigError(f"{offload_dir} holds no offloaded weights and the disk-mapped modules are empty; "
                                  "load them with load_checkpoint_and_dispatch(..., offload_folder=...)")
            offload_state_dict(offload_dir, disk_state)
    execution_device = {name: main_device if _place_key(device) in (HOST, DISK) else device
                        for name, device in device_map.items()}
    execution_device.setdefault("", main_device)
    offload = {name: _place_key(device) in offloaded_places for name, device in device_map.items()}
    weights_map = None
    if any(offload.values()):
        weights_map = OffloadedWeightsLoader(state_dict=state_dict, save_folder=offload_dir, index=offload_index)
    attach_align_device_hook_on_blocks(model, execution_device=execution_device, offload=offload,
                                       weights_map=weights_map, offload_buffers=offload_buffers, skip_keys=skip_keys,
                                       preload_module_classes=preload_module_classes,
                                       tied_params_map=TiedParamsMap.for_model(model))
    stream_offloaded_weights(model)
    return model


def _place_key(device: Any) -> Any:
    """A device-map value in one spelling: ``"cpu"``, ``"disk"``, or the device index/string."""
    if isinstance(device, torch.device):
        return HOST if device.type == HOST else str(device)
    return device


def load_checkpoint_and_dispatch(model: nn.Module, checkpoint: str | os.PathLike, device_map: Any = None,
                                 max_memory: dict[int | str, int | str] | None = None,
                                 no_split_module_classes: list[str] | None = None,
                                 offload_folder: str | os.PathLike | None = None, offload_buffers: bool = False,
                                 dtype: torch.dtype | str | None = None, offload_state_dict: bool | None = None,
                                 skip_keys: str | list[str] | None = None,
                                 preload_module_classes: list[str] | None = None, force_hooks: bool = False,
                                 strict: bool = False, full_state_dict: bool = True,
                                 broadcast_from_rank0: bool = False) -> nn.Module:
    """Load ``checkpoint`` into ``model`` (usually built under :func:`init_empty_weights`) and
    dispatch it.

    ``device_map`` is a dict, or ``"auto"`` / ``"balanced"`` / ``"balanced_low_0"`` /
    ``"sequential"`` to infer one within ``max_memory``. Weights mapped to disk are read from
    the checkpoint itself when it is safetensors (nothing is copied), otherwise written to
    ``offload_folder``. A map that sends everything to disk works.
    """
    device_map = resolve_device_map(model, device_map, max_memory, no_split_module_classes, dtype, offload_buffers)
    index = load_checkpoint_to_offload_index(model, checkpoint, device_map=device_map, offload_folder=offload_folder,
                                             dtype=dtype, offload_state_dict=bool(offload_state_dict),
                                             offload_buffers=offload_buffers, strict=strict)
    if offload_folder is not None and index:
        save_offload_index(index, offload_folder)
    if device_map is None:
        return model
    return dispatch_model(model, device_map, offload_dir=offload_folder, offload_index=index or None,
                          offload_buffers=offload_buffers, skip_keys=skip_keys,
                          preload_module_classes=preload_module_classes, force_hooks=force_hooks)
