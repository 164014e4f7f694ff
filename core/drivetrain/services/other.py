"""Small helpers on modules, state dicts and objects (``accelerate.utils.other``)."""

from __future__ import annotations

import collections
import copy
import logging
import os
import types
from typing import Any

import torch
from ..kernel.contributed import surface_getattr

logger = logging.getLogger("drivetrain.utils.other")  # its name before the layers, kept for log filters


# --------------------------------------------------------------------- compiled modules


def _compiled_type() -> type | None:
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except ImportError:  # pragma: no cover - torch without dynamo
        return None
    return OptimizedModule


def is_compiled_module(module: Any) -> bool:
    """Whether ``module`` is the result of ``torch.compile(module)``."""
    compiled = _compiled_type()
    return compiled is not None and isinstance(module, compiled)


def has_compiled_regions(module: Any) -> bool:
    """Whether some submodule of ``module`` (not ``module`` itself) is compiled: regional compilation."""
    if not isinstance(module, torch.nn.Module):
        return False
    return any(is_compiled_module(sub) for name, sub in module.named_modules() if name)


def _repeated_blocks(container: torch.nn.Module) -> bool:
    """A ``ModuleList``/``Sequential`` of several blocks of one class: the layers of a transformer."""
    if not isinstance(container, (torch.nn.ModuleList, torch.nn.Sequential)) or len(container) < 2:
        return False
    return len({type(block) for block in container}) == 1


def _copy_module(node: torch.nn.Module) -> torch.nn.Module:
    """A shallow copy of ``node`` whose methods bound to the instance (``node.forward =
    MethodType(f, node)``, as wrappers install them) are bound to the copy: otherwise calling
    the copy would run on the original."""
    clone = copy.copy(node)
    for name, value in node.__dict__.items():
        if isinstance(value, types.MethodType) and value.__self__ is node:
            clone.__dict__[name] = types.MethodType(value.__func__, clone)
    return clone


def compile_regions(module: torch.nn.Module, **compile_kwargs: Any) -> torch.nn.Module:
    """Compile each block of ``module``'s repeated layers instead of the whole model.

    Blocks of one class compile once and reuse the graph, so start-up is much faster than
    ``torch.compile(module)`` for deep models. Returns a shallow copy of ``module`` whose
    repeated blocks are compiled (other submodules are shared with ``module``, which is left
    as it was and reachable as ``_orig_mod``); a module without repeated blocks is compiled
    whole.
    """

    def rebuild(node: torch.nn.Module) -> torch.nn.Module:
        clone = _copy_module(node)
        clone._modules = collections.OrderedDict()
        for name, child in node._modules.items():
            if child is None:
                clone._modules[name] = None
            elif _repeated_blocks(child):
                blocks = _copy_module(child)
                blocks._modules = collections.OrderedDict(
                    (index, torch.compile(block, **compile_kwargs)) for index, block in child._modules.items())
                clone._modules[name] = blocks
            elif any(_repeated_blocks(sub) for sub in child.modules()):
                clone._modules[name] = rebuild(child)
            else:
                clone._modules[name] = child  # nothing to compile below: shared with the original
        return clone

    if not any(_repeated_blocks(sub) for sub in module.modules()):
        return torch.compile(module, **compile_kwargs)
    result = rebuild(module)
    object.__setattr__(result, "_orig_mod", module)
    return result


def remove_mixed_precision_forward(model: torch.nn.Module) -> None:
    """Undo the autocast ``forward`` a precision plugin installed (it keeps ``_original_forward``)."""
    original = model.__dict__.pop("_original_forward", None)
    if original is not None:
        model.forward = original


def unwrap_prepared_model(run: Any, model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                          keep_torch_compile: bool = True) -> torch.nn.Module:
    """The user's module from inside a prepared one (the strategy's wrapper, ``DataParallel``,
    autocast, compilation). With ``keep_torch_compile`` a compiled model comes back compiled
    around the unwrapped module: a new compile wrapper with the same settings, so the prepared
    model (still wrapped for training) is left as it is."""
    compiled = model if hasattr(model, "_orig_mod") else None
    inner = model._orig_mod if compiled is not None else model
    inner = run.call("drivetrain_unwrap_model", model=inner, keep_fp32_wrapper=keep_fp32_wrapper) or inner
    if isinstance(inner, torch.nn.DataParallel):  # torch's own one-process wrapper: no plugin's
        inner = inner.module
    if not keep_fp32_wrapper:
        remove_mixed_precision_forward(inner)
    if not keep_torch_compile or compiled is None:
        return inner
    if compiled._orig_mod is inner:
        return compiled
    try:
        return type(compiled)(inner, compiled.dynamo_ctx)
    except (AttributeError, TypeError):  # a torch whose compile wrapper is built otherwise
        return torch.compile(inner)


def extract_model_from_parallel(model: Any, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True,
                                recursive: bool = False) -> Any:
    """The user's module inside a prepared (parallel-wrapped, compiled, autocast) one.

    Uses the unwrapping of the plugins active in this process's run when there is one, and
    otherwise peels torch's own wrappers (``DataParallel``, ``DistributedDataParallel``,
    ``torch.compile``).
    """
    from ..runtime.state import AcceleratorState

    compiled = model if is_compiled_module(model) else None
    inner = compiled._orig_mod if compiled is not None else model
    run = AcceleratorState().run if AcceleratorState._shared_state.get("_initialized") else None
    unwrapped = None
    if run is not None:
        unwrapped = run.call("drivetrain_unwrap_model", model=inner, keep_fp32_wrapper=keep_fp32_wrapper)
    if unwrapped is None:
        unwrapped = inner
        while isinstance(unwrapped, (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)):
            unwrapped = unwrapped.module
    if not keep_fp32_wrapper:
        remove_mixed_precision_forward(unwrapped)
    if recursive:
        for name, child in list(unwrapped.named_children()):
            setattr(unwrapped, name, extract_model_from_parallel(child, keep_fp32_wrapper, keep_torch_compile, True))
    if keep_torch_compile and compiled is not None:
        compiled._orig_mod = unwrapped
        return compiled
    return unwrapped


def model_has_dtensor(model: torch.nn.Module) -> bool:
    """Whether any parameter of ``model`` is a ``DTensor`` (a sharded model)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without distributed
        return False
    return any(isinstance(p, DTensor) for p in model.parameters())


def get_module_class_from_name(module: torch.nn.Module, name: str) -> type | None:
    """The class called ``name`` of ``module`` or of its first submodule (depth first) that has it;
    ``None`` when none has. Wrapping policies name layer classes by their names."""
    for node in module.modules():
        if type(node).__name__ == name:
            return type(node)
    return None


def get_module_children_bottom_up(model: torch.nn.Module, return_fqns: bool = False) -> list[Any]:
    """Every submodule of ``model`` with children before their parent, ``model`` last.

    With ``return_fqns=True``, ``(qualified name, module)`` pairs (``""`` for ``model``).
    """
    ordered: list[tuple[str, torch.nn.Module]] = []

    def visit(prefix: str, node: torch.nn.Module) -> None:
        for name, child in node.named_children():
            visit(f"{prefix}.{name}" if prefix else name, child)
        ordered.append((prefix, node))

    visit("", model)
    return ordered if return_fqns else [module for _name, module in ordered]


# ------------------------------------------------------------------------- state dicts


def _storage_key(tensor: torch.Tensor) -> tuple[Any, ...]:
    storage = tensor.untyped_storage()
    return (tensor.device, storage.data_ptr(), storage.nbytes())


def clean_state_dict_for_safetensors(state_dict: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``state_dict`` safetensors can write: tensors sharing memory (tied weights)
    kept once under their first name, every tensor contiguous."""
    seen: dict[tuple[Any, ...], str] = {}
    dropped: list[str] = []
    cleaned: dict[str, Any] = {}
    for name, value in state_dict.items():
        if isinstance(value, torch.Tensor) and value.device.type != "meta":
            key = _storage_key(value)
            if key in seen:
                dropped.append(name)
                continue
            seen[key] = name
            value = value.contiguous()
        cleaned[name] = value
    if dropped:
        # "Removed shared tensor" is the phrase Accelerate's users filter their logs on
        logger.warning("Removed shared tensor %s while saving: they share memory with another entry (tied weights)",
                       ", ".join(dropped))
    return cleaned


def save(obj: Any, f: str | os.PathLike, save_on_each_node: bool = False, safe_serialization: bool = False) -> None:
    """Write ``obj`` from the main process (each node's main process with ``save_on_each_node``).

    ``safe_serialization=True`` writes a dict of tensors with safetensors, otherwise ``torch.save``.
    """
    from ..runtime.state import PartialState

    state = PartialState()
    if not (state.is_local_main_process if save_on_each_node else state.is_main_process):
        return
    if safe_serialization:
        from safetensors.torch import save_file

        save_file(clean_state_dict_for_safetensors(obj), os.fspath(f), metadata={"format": "pt"})
    else:
        torch.save(obj, f)


def load(f: Any, map_location: Any = None, **kwargs: Any) -> Any:
    """``torch.load`` of tensors and plain data only (``weights_only=True``): no code runs while loading.

    Unlike Accelerate's, ``weights_only=False`` is refused: a file that must rebuild other
    objects is one to load with ``torch.load`` yourself, having decided to trust it.
    """
    from ..kernel.errors import CheckpointError

    if kwargs.pop("weights_only", True) is not True:
        raise CheckpointError("drivetrain.utils.load reads only tensors and plain data (weights_only=True); "
                              "call torch.load yourself for a file you trust that holds other objects")
    return torch.load(f, map_location=map_location, weights_only=True, **kwargs)


# ------------------------------------------------------------------------------ objects


def get_pretty_name(obj: Any) -> str:
    """A readable name for a function, class or object (its qualified name when it has one)."""
    if not hasattr(obj, "__qualname__") and not hasattr(obj, "__name__"):
        obj = getattr(obj, "__class__", obj)
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or str(obj)


def merge_dicts(source: dict[str, Any], destination: dict[str, Any]) -> dict[str, Any]:
    """Merge ``source`` into ``destination`` recursively (nested dicts merged, other values replaced); returns ``destination``."""
    for key, value in source.items():
        if isinstance(value, dict):
            merge_dicts(value, destination.setdefault(key, {}))
        else:
            destination[key] = value
    return destination


def recursive_getattr(obj: Any, attr: str) -> Any:
    """``getattr`` along a dotted path: ``recursive_getattr(model, "encoder.layer.0")``."""
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def convert_bytes(size: float) -> str:
    """A size in bytes as text with a binary unit: ``convert_bytes(1536) == "1.5 KB"``."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1024.0:
            return f"{round(size, 2)} {unit}"
        size /= 1024.0
    return f"{round(size, 2)} PB"



def is_peft_model(model: Any) -> bool:
    """Whether ``model`` is a ``peft`` ``PeftModel`` (``False`` when peft is not installed)."""
    from .availability import is_peft_available

    if not is_peft_available():
        return False
    from peft import PeftModel

    return isinstance(model, PeftModel)


# names a plugin contributes to this module (keys "utils.other.<name>"), served on first access
__getattr__ = surface_getattr("drivetrain.utils.other")
