"""Hooks around a module's ``forward``: move inputs and weights where they must be.

A hook (:class:`ModelHook`) gets ``pre_forward`` before the module's own forward and
``post_forward`` after it. :func:`add_hook_to_module` keeps the original forward in
``module._old_forward`` and the hook in ``module._hf_hook`` (Accelerate's attribute names, so
libraries that look for them, such as transformers, find them).

:class:`AlignDevicesHook` is what big-model inference is made of: it moves a module's inputs
to its execution device, and for an offloaded module loads its weights there just before
forward (from memory or from disk) and drops them right after.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Mapping

import torch
from torch import nn

from .modeling import HOST, META, named_module_tensors, resolve_device, set_module_tensor_to_device
from .offload import PrefixedDataset
from .streaming import StreamedModule, WeightStreamer, module_dtypes
from ...selection.constants import supported_layers_for_upcasting
from ...tensors.nested import find_device, send_to_device

__all__ = [
    "ModelHook", "SequentialHook", "add_hook_to_module", "remove_hook_from_module", "remove_hook_from_submodules",
    "AlignDevicesHook", "CpuOffload", "UserCpuOffloadHook", "LayerwiseCastingHook", "attach_execution_device_hook",
    "attach_align_device_hook", "attach_align_device_hook_on_blocks", "attach_layerwise_casting_hooks",
    "TiedParamsMap",
]


class TiedParamsMap(dict):
    """A ``tied_params_map`` that knows the model's tied groups by name.

    Given to every hook of one model (the model's own hook included), it makes an offloaded
    tied weight (say, input and output embeddings) load once per forward of the model: the
    first module that needs it loads it, the others of its group use that same tensor, and it
    is dropped when the outermost hooked forward returns. Entries are ``{group: {device:
    tensor}}``, the group named by its first parameter name.
    """

    def __init__(self, tied_groups: list[list[str]]) -> None:
        super().__init__()
        self.group_of = {name: group[0] for group in tied_groups for name in group}
        self.depth = 0  # hooked forwards running now; at 0 the loaded tied weights are dropped

    @classmethod
    def for_model(cls, model: nn.Module) -> TiedParamsMap | None:
        """The map for ``model``'s tied parameters, or ``None`` when it ties none."""
        from .modeling import find_tied_parameters

        groups = find_tied_parameters(model)
        return cls(groups) if groups else None


class ModelHook:
    """Code run around a module's forward. Subclasses override what they need.

    ``no_grad = True`` runs the module's forward under ``torch.no_grad()``.
    """

    no_grad = False

    def init_hook(self, module: nn.Module) -> nn.Module:
        """Called when the hook is attached; returns the module."""
        return module

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Called with forward's arguments; returns the arguments forward gets."""
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        """Called with forward's output; returns what the caller gets."""
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        """Called when the hook is removed; returns the module."""
        return module


class SequentialHook(ModelHook):
    """Several hooks run one after the other (pre-forwards in order, post-forwards too)."""

    def __init__(self, *hooks: ModelHook) -> None:
        self.hooks = list(hooks)

    def init_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.init_hook(module)
        return module

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        for hook in self.hooks:
            args, kwargs = hook.pre_forward(module, *args, **kwargs)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        for hook in self.hooks:
            output = hook.post_forward(module, output)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.detach_hook(module)
        return module


def _hooked_forward(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    hook = module._hf_hook
    args, kwargs = hook.pre_forward(module, *args, **kwargs)
    try:
        if hook.no_grad:
            with torch.no_grad():
                output = module._old_forward(*args, **kwargs)
        else:
            output = module._old_forward(*args, **kwargs)
    except BaseException:
        _forward_failed(hook)
        raise
    return hook.post_forward(module, output)


def _forward_failed(hook: ModelHook) -> None:
    """A forward raised, so no post_forward comes: keep a TiedParamsMap's count of running
    forwards true, or its loaded tied weights would never be dropped, and release streamed
    weights, or they would count against the read-ahead window."""
    for part in hook.hooks if isinstance(hook, SequentialHook) else [hook]:
        if isinstance(part, AlignDevicesHook) and part.offload and part.streamer is not None:
            part.streamer.release(id(part))
        tied = getattr(part, "tied_params_map", None)
        if isinstance(tied, TiedParamsMap):
            tied.depth = max(tied.depth - 1, 0)
            if tied.depth == 0:
                tied.clear()


def add_hook_to_module(module: nn.Module, hook: ModelHook, append: bool = False) -> nn.Module:
    """Run ``hook`` around ``module``'s forward. With ``append``, after the hook it already has;
    otherwise the existing hook is removed first."""
    if append and getattr(module, "_hf_hook", None) is not None:
        previous = module._hf_hook
        remove_hook_from_module(module)
        hook = SequentialHook(previous, hook)
    elif getattr(module, "_hf_hook", None) is not None:
        remove_hook_from_module(module)
    if not hasattr(module, "_old_forward"):
        # An instance-level forward (already patched by someone) is kept as it is.
        module._old_forward = module.__dict__.get("forward", module.forward)
        module._hf_forward_was_instance = "forward" in module.__dict__
    module = hook.init_hook(module)
    module._hf_hook = hook
    forward = functools.partial(_hooked_forward, module)
    functools.update_wrapper(forward, module._old_forward)
    module.forward = forward
    return module


def remove_hook_from_module(module: nn.Module, recurse: bool = False) -> nn.Module:
    """Remove ``module``'s hook (calling its ``detach_hook``) and give back its own forward."""
    hook = getattr(module, "_hf_hook", None)
    if hook is not None:
        hook.detach_hook(module)
        del module._hf_hook
    if hasattr(module, "_old_forward"):
        if getattr(module, "_hf_forward_was_instance", False):
            module.forward = module._old_forward
        else:
            module.__dict__.pop("forward", None)
        del module._old_forward
        module.__dict__.pop("_hf_forward_was_instance", None)
    if recurse:
        for child in module.children():
            remove_hook_from_module(child, recurse=True)
    return module


def remove_hook_from_submodules(module: nn.Module) -> None:
    """Remove the hooks of every sub-module of ``module`` and of ``module`` itself."""
    remove_hook_from_module(module, recurse=True)


class _TensorSlot:
    """One offloaded parameter or buffer of a module: filled with its weights for a forward,
    emptied (its meta tensor put back) after, with no more work than the assignment.

    A parameter of a class of its own (quantized weights carry their state in the class)
    goes through :func:`set_module_tensor_to_device`, which keeps that state.
    """

    def __init__(self, module: nn.Module, name: str) -> None:
        owner_name, _, self.attribute = name.rpartition(".")
        self.name = name
        self.owner = module.get_submodule(owner_name) if owner_name else module
        self.is_buffer = self.attribute in self.owner._buffers
        self.meta = (self.owner._buffers if self.is_buffer else self.owner._parameters)[self.attribute]
        self.plain = self.is_buffer or type(self.meta) is nn.Parameter
        self.requires_grad = bool(getattr(self.meta, "requires_grad", False))
        self._wrapped: tuple[torch.Tensor, nn.Parameter] | None = None

    def fill(self, value: torch.Tensor, kept: bool = False) -> None:
        """Put ``value`` in. ``kept``: the streamer keeps ``value`` between forwards (a view),
        so the parameter made around it is kept too and reused while the value is the same."""
        if self.is_buffer:
            self.owner._buffers[self.attribute] = value
        elif self.plain:
            if self._wrapped is None or self._wrapped[0] is not value:
                wrapped = (value, nn.Parameter(value, requires_grad=self.requires_grad and value.is_floating_point()))
                self._wrapped = wrapped if kept else None
            else:
                wrapped = self._wrapped
            self.owner._parameters[self.attribute] = wrapped[1]
        else:
            set_module_tensor_to_device(self.owner, self.attribute, value.device, value=value)

    def empty(self) -> None:
        (self.owner._buffers if self.is_buffer else self.owner._parameters)[self.attribute] = self.meta


class AlignDevicesHook(ModelHook):
    """Runs a module on ``execution_device``: inputs are moved there and, with ``offload``,
    weights are loaded there from ``weights_map`` before forward and released after.

    Args:
        execution_device: where forward runs (``None``: leave inputs where they are).
        offload: the module's weights live in ``weights_map`` (CPU memory or disk), not on it.
        io_same_device: outputs go back to the device the inputs came from.
        weights_map: name -> tensor mapping of the module's weights (when offloaded); by
            default the module's own weights, moved to the CPU.
        offload_buffers: offload buffers too (otherwise they stay on the execution device).
        place_submodules: the hook handles the weights of sub-modules too.
        skip_keys: keys of dict inputs/outputs never moved.
        tied_params_map: shared between hooks so tied weights are loaded once.
    """

    #: What ``has_offloaded_params`` looks for: the model helpers sit below this module and
    #: cannot import the class to test ``isinstance``.
    loads_weights_at_forward = True

    def __init__(self, execution_device: Any = None, offload: bool = False, io_same_device: bool = False,
                 weights_map: Mapping | None = None, offload_buffers: bool = False, place_submodules: bool = False,
                 skip_keys: str | list[str] | None = None, tied_params_map: dict[int, dict[Any, torch.Tensor]] | None = None
                 ) -> None:
        self.execution_device = execution_device
        self.offload = offload
        self.io_same_device = io_same_device
        self.weights_map = weights_map
        self.offload_buffers = offload_buffers
        self.place_submodules = place_submodules
        self.skip_keys = skip_keys
        self.tied_params_map = tied_params_map
        self.module_name = ""  # where the module sits in the model: finds its names in a TiedParamsMap
        self.input_device: Any = None
        self.param_original_devices: dict[str, torch.device] = {}
        self.buffer_original_devices: dict[str, torch.device] = {}
        self.tensor_names: list[str] = []
        #: Brings the offloaded weights in for each forward (set by ``init_hook``; dispatching
        #: gives every hook of a model one shared streamer, which reads ahead).
        self.streamer: WeightStreamer | None = None
        self.streamed: StreamedModule | None = None
        self._slots: list[_TensorSlot] = []
        self._tied_names: set[str] = set()
        self._tied_loaded: list[torch.Tensor] = []  # tied weights this hook loaded in the running forward

    def __repr__(self) -> str:
        return (f"AlignDevicesHook(execution_device={self.execution_device}, offload={self.offload}, "
                f"io_same_device={self.io_same_device}, offload_buffers={self.offload_buffers}, "
                f"place_submodules={self.place_submodules}, skip_keys={self.skip_keys!r})")

    def init_hook(self, module: nn.Module) -> nn.Module:
        if self.execution_device is not None:
            self._device = resolve_device(self.execution_device)
        else:
            self._device = None
        recurse = self.place_submodules
        if not self.offload:
            if self._device is not None:
                for name, tensor in named_module_tensors(module, recurse=recurse):
                    if tensor.device.type != META:  # empty ones belong to an offload hook
                        set_module_tensor_to_device(module, name, self._device)
            return module
        self.param_original_devices = {n: p.device for n, p in module.named_parameters(recurse=recurse)}
        self.buffer_original_devices = {n: b.device for n, b in module.named_buffers(recurse=recurse)}
        if self.weights_map is None:
            self.weights_map = {name: tensor.detach().to(HOST) for name, tensor in
                                named_module_tensors(module, include_buffers=self.offload_buffers, recurse=recurse)}
        tensors = list(named_module_tensors(module, include_buffers=self.offload_buffers, recurse=recurse,
                                            remove_non_persistent=True))
        self.tensor_names = [name for name, _ in tensors]
        # A tied weight is loaded by whichever of its modules runs first in a forward (see
        # _load_tied_or), so it is read when needed, not streamed by every module that ties it.
        tied = self.tied_params_map.group_of if isinstance(self.tied_params_map, TiedParamsMap) else {}
        self._tied_names = {name for name in self.tensor_names if self._full_name(name) in tied}
        streamed = [(name, t) for name, t in tensors if name not in self._tied_names]
        self.streamed = StreamedModule(self.weights_map, [name for name, _ in streamed],
                                       module_dtypes(module, self.tensor_names), self._device or torch.device(HOST),
                                       sum(t.numel() * t.element_size() for _, t in streamed))
        self.use_streamer(WeightStreamer(read_ahead=False))
        for name in self.tensor_names:
            set_module_tensor_to_device(module, name, META)
        self._slots = [_TensorSlot(module, name) for name in self.tensor_names]
        if not self.offload_buffers and self._device is not None:
            for name, _ in module.named_buffers(recurse=recurse):
                set_module_tensor_to_device(module, name, self._device)
        return module

    def use_streamer(self, streamer: WeightStreamer) -> None:
        """Bring this offloaded module's weights in through ``streamer`` (shared by the hooks of
        one model, it reads the next modules' weights ahead while this one runs)."""
        if self.streamed is None:
            raise ValueError("only a hook that offloads weights, once attached, streams them")
        self.streamer = streamer
        streamer.register(id(self), self.streamed)

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if self.io_same_device:
            self.input_device = find_device([args, kwargs])
        by_name = isinstance(self.tied_params_map, TiedParamsMap)
        if by_name:
            self.tied_params_map.depth += 1
        if self.offload:
            device = self._device or torch.device(HOST)
            loaded = self.streamer.take(id(self))
            for slot in self._slots:
                if slot.name in self._tied_names:
                    self._load_tied_or(module, slot, device)
                elif self.tied_params_map is None or by_name:
                    slot.fill(loaded[slot.name], kept=self.streamed.read_is_quick)
                else:
                    set_module_tensor_to_device(module, slot.name, device, value=loaded[slot.name],
                                                tied_params_map=self.tied_params_map)
        if self._device is None or _all_on(self._device, args, kwargs):
            return args, kwargs
        return (send_to_device(args, self._device),
                send_to_device(kwargs, self._device, skip_keys=self.skip_keys))

    def _full_name(self, name: str) -> str:
        return f"{self.module_name}.{name}" if self.module_name else name

    def _load_tied_or(self, module: nn.Module, slot: _TensorSlot, device: torch.device) -> None:
        """Load tied weight ``slot``, or take the copy a module tied to it already loaded this forward."""
        tied: TiedParamsMap = self.tied_params_map  # type: ignore[assignment]
        group = tied.group_of[self._full_name(slot.name)]
        shared = tied.get(group, {}).get(device)
        if shared is not None:
            slot.owner._parameters[slot.attribute] = shared
            return
        value = self.streamed.read_one(slot.name)
        slot.fill(value)
        self._tied_loaded.append(value)
        tied.setdefault(group, {})[device] = module.get_parameter(slot.name)

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        if self.offload:
            for slot in self._slots:
                slot.empty()
            self.streamer.release(id(self))
            if self._tied_loaded:
                # Its pages go now; a module tied to it later in this forward reads them again
                # from the page cache, through the same tensor.
                self.streamed.release_tensors(self._tied_loaded)
                self._tied_loaded.clear()
        if isinstance(self.tied_params_map, TiedParamsMap):
            self.tied_params_map.depth = max(self.tied_params_map.depth - 1, 0)
            if self.tied_params_map.depth == 0:
                self.tied_params_map.clear()  # the forward is over: loaded tied weights go
        elif self.offload and self.tied_params_map is not None:
            for copies in self.tied_params_map.values():
                copies.pop(self._device, None)
        if self.io_same_device and self.input_device is not None:
            output = send_to_device(output, self.input_device, skip_keys=self.skip_keys)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        if self.offload:
            for name, device in {**self.param_original_devices, **self.buffer_original_devices}.items():
                if name in self.weights_map and device != torch.device(META):
                    set_module_tensor_to_device(module, name, device, value=self.weights_map[name])
        return module


_PLAIN_LEAVES = (type(None), bool, int, float, str)


def _all_on(device: torch.device, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether forward's arguments are flat and every tensor among them is on ``device``.

    The common case inside a model, checked for much less than moving them would cost (a hook
    on every sub-module pays it on each call); anything nested takes the general path."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            if value.device != device:
                return False
        elif not isinstance(value, _PLAIN_LEAVES):
            return False
    return True


def attach_execution_device_hook(module: nn.Module, execution_device: Any, skip_keys: str | list[str] | None = None,
                                 preload_module_classes: list[str] | None = None,
                                 tied_params_map: dict[int, dict[Any, torch.Tensor]] | None = None) -> None:
    """Move inputs to ``execution_device`` for ``module`` and every sub-module holding weights
    (its own or its children's) that has no hook yet."""
    if not hasattr(module, "_hf_hook") and len(module.state_dict()) > 0:
        add_hook_to_module(module, AlignDevicesHook(execution_device, skip_keys=skip_keys,
                                                    tied_params_map=tied_params_map))
    if preload_module_classes is not None and module.__class__.__name__ in preload_module_classes:
        return
    for child in module.children():
        attach_execution_device_hook(child, execution_device, skip_keys, preload_module_classes, tied_params_map)


def attach_align_device_hook(module: nn.Module, execution_device: Any = None, offload: bool = False,
                             weights_map: Mapping | None = None, offload_buffers: bool = False, module_name: str = "",
                             skip_keys: str | list[str] | None = None, preload_module_classes: list[str] | None = None,
                             tied_params_map: dict[int, dict[Any, torch.Tensor]] | None = None) -> None:
    """Attach an :class:`AlignDevicesHook` to every sub-module with weights of its own (a module
    of a class in ``preload_module_classes`` is handled as one, sub-modules included)."""
    own = any(True for _ in named_module_tensors(module))
    whole = preload_module_classes is not None and module.__class__.__name__ in preload_module_classes
    if own or whole:
        prefix = f"{module_name}." if module_name else ""
        mapped = PrefixedDataset(weights_map, prefix) if weights_map is not None and prefix else weights_map
        hook = AlignDevicesHook(execution_device, offload=offload, weights_map=mapped, offload_buffers=offload_buffers,
                                place_submodules=whole, skip_keys=skip_keys, tied_params_map=tied_params_map)
        hook.module_name = module_name
        add_hook_to_module(module, hook, append=True)
    if whole:
        return
    for child_name, child in module.named_children():
        attach_align_device_hook(child, execution_device, offload, weights_map, offload_buffers,
                                 f"{module_name}.{child_name}" if module_name else child_name, skip_keys,
                                 preload_module_classes, tied_params_map)


def attach_align_device_hook_on_blocks(module: nn.Module, execution_device: Any = None, offload: Any = False,
                                       weights_map: Mapping | None = None, offload_buffers: bool = False,
                                       module_name: str = "", skip_keys: str | list[str] | None = None,
                                       preload_module_classes: list[str] | None = None,
                                       tied_params_map: dict[int, dict[Any, torch.Tensor]] | None = None) -> None:
    """Attach hooks block by block: ``execution_device`` and ``offload`` map module names (the
    keys of a device map) to where each block runs and whether its weights are offloaded."""
    if not isinstance(execution_device, Mapping) and not isinstance(offload, Mapping):
        if not offload:
            hook = AlignDevicesHook(execution_device, io_same_device=True, skip_keys=skip_keys, place_submodules=True,
                                    tied_params_map=tied_params_map)
            add_hook_to_module(module, hook)
        else:
            attach_align_device_hook(module, execution_device, True, weights_map, offload_buffers, module_name,
                                     skip_keys, preload_module_classes, tied_params_map)
        return
    if not isinstance(execution_device, Mapping):
        execution_device = {key: execution_device for key in offload}
    if not isinstance(offload, Mapping):
        offload = {key: offload for key in execution_device}

    if module_name in execution_device and module_name in offload and not offload[module_name]:
        add_hook_to_module(module, AlignDevicesHook(execution_device[module_name], offload_buffers=offload_buffers,
                                                    io_same_device=module_name == "", place_submodules=True,
                                                    skip_keys=skip_keys, tied_params_map=tied_params_map))
        # Sub-modules move their inputs too: a block's forward may hand them tensors made elsewhere.
        attach_execution_device_hook(module, execution_device[module_name], skip_keys, preload_module_classes,
                                     tied_params_map)
        return
    if module_name in execution_device and module_name in offload:
        attach_align_device_hook(module, execution_device[module_name], True, weights_map, offload_buffers,
                                 module_name, skip_keys, preload_module_classes, tied_params_map)
        if module_name == "":  # the whole model offloaded: its outputs go back where inputs came from
            add_hook_to_module(module, AlignDevicesHook(execution_device[module_name], io_same_device=True,
                                                        skip_keys=skip_keys, tied_params_map=tied_params_map),
                               append=True)
        return
    if module_name == "":
        add_hook_to_module(module, AlignDevicesHook(execution_device.get(""), io_same_device=True, skip_keys=skip_keys,
                                                    tied_params_map=tied_params_map))
    for child_name, child in module.named_children():
        attach_align_device_hook_on_blocks(child, execution_device, offload, weights_map, offload_buffers,
                                           f"{module_name}.{child_name}" if module_name else child_name, skip_keys,
                                           preload_module_classes, tied_params_map)


class CpuOffload(ModelHook):
    """Keeps a whole model on the CPU and moves it to ``execution_device`` for its forward; the
    previous model of a pipeline (``prev_module_hook``) goes back to the CPU first."""

    def __init__(self, execution_device: Any = None, prev_module_hook: UserCpuOffloadHook | None = None) -> None:
        from .modeling import current_platform

        if execution_device is None:
            platform = current_platform()
            execution_device = platform.device_for(0) if platform.device_count() else HOST
        self.execution_device = resolve_device(execution_device)
        self.prev_module_hook = prev_module_hook

    def init_hook(self, module: nn.Module) -> nn.Module:
        return module.to(HOST)

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if self.prev_module_hook is not None:
            self.prev_module_hook.offload()
        module.to(self.execution_device)
        return send_to_device(args, self.execution_device), send_to_device(kwargs, self.execution_device)


class UserCpuOffloadHook:
    """What :func:`~drivetrain.big_modeling.cpu_offload_with_hook` returns: ``offload()`` puts the
    model back on the CPU, ``remove()`` removes the hook."""

    def __init__(self, model: nn.Module, hook: CpuOffload) -> None:
        self.model = model
        self.hook = hook

    def offload(self) -> None:
        self.hook.init_hook(self.model)

    def remove(self) -> None:
        remove_hook_from_module(self.model)


class LayerwiseCastingHook(ModelHook):
    """Weights stored in ``storage_dtype``, cast to ``compute_dtype`` for forward only."""

    def __init__(self, storage_dtype: torch.dtype, compute_dtype: torch.dtype, non_blocking: bool = False) -> None:
        self.storage_dtype = storage_dtype
        self.compute_dtype = compute_dtype
        self.non_blocking = non_blocking

    def _cast(self, module: nn.Module, dtype: torch.dtype) -> None:
        # Only this module's own weights: its children have hooks of their own.
        for param in module.parameters(recurse=False):
            if param.is_floating_point():
                param.data = param.data.to(dtype, non_blocking=self.non_blocking)

    def init_hook(self, module: nn.Module) -> nn.Module:
        self._cast(module, self.storage_dtype)
        return module

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        self._cast(module, self.compute_dtype)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        self._cast(module, self.storage_dtype)
        return output


def attach_layerwise_casting_hooks(module: nn.Module, storage_dtype: torch.dtype, compute_dtype: torch.dtype,
                                   skip_modules_pattern: str | tuple[str, ...] | None = None,
                                   skip_modules_classes: tuple[type[nn.Module], ...] | None = None,
                                   non_blocking: bool = False) -> None:
    """Store the weights of ``module``'s layers in ``storage_dtype`` (say ``torch.float8_e4m3fn``)
    and compute in ``compute_dtype``: each layer is cast up for its forward and back after.

    Only the layers of ``SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING`` (convolutions and linear
    layers) are cast; norms, embeddings and parameters held directly by other modules keep
    their dtype, as their precision matters beyond one product. Layers matching
    ``skip_modules_pattern`` (regular expressions searched in the module's dotted name) or of a
    class in ``skip_modules_classes`` are left alone, with everything inside them.
    """
    patterns = (skip_modules_pattern,) if isinstance(skip_modules_pattern, str) else tuple(skip_modules_pattern or ())
    skipped = tuple(skip_modules_classes or ())
    castable = supported_layers_for_upcasting()

    def visit(name: str, current: nn.Module) -> None:
        if (patterns and any(re.search(p, name) for p in patterns)) or (skipped and isinstance(current, skipped)):
            return
        if isinstance(current, castable):
            add_hook_to_module(current, LayerwiseCastingHook(storage_dtype, compute_dtype, non_blocking), append=True)
            return
        for child_name, child in current.named_children():
            visit(f"{name}.{child_name}" if name else child_name, child)

    visit("", module)

