"""Nested structures of tensors within one process: walk, move, measure, slice, convert.

Every function accepts a tensor or any nesting of lists, tuples, namedtuples and mappings of
tensors, and returns the same structure. Nothing here reads the process state, so anything
that needs ``recursively_apply`` can use it without depending on the run; the operations
across processes are in :mod:`drivetrain.services.cross_process`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..kernel.errors import UnsupportedDataError


@dataclass
class TensorInformation:
    """The shape and dtype of a tensor, without its data."""

    shape: torch.Size
    dtype: torch.dtype


def is_torch_tensor(tensor: Any) -> bool:
    """Whether ``tensor`` is a ``torch.Tensor``."""
    return isinstance(tensor, torch.Tensor)


def is_tensor_information(tensor_info: Any) -> bool:
    """Whether ``tensor_info`` is a :class:`TensorInformation`."""
    return isinstance(tensor_info, TensorInformation)


def is_namedtuple(data: Any) -> bool:
    """Whether ``data`` is an instance of a ``collections.namedtuple`` class."""
    return isinstance(data, tuple) and hasattr(data, "_asdict") and hasattr(data, "_fields")


def honor_type(obj: Any, generator: Any) -> Any:
    """Build an object of ``obj``'s sequence type (list, tuple, namedtuple) from ``generator``."""
    if is_namedtuple(obj):
        return type(obj)(*list(generator))
    return type(obj)(generator)


def _same_mapping_type(original: Mapping, items: dict) -> Mapping:
    try:
        return type(original)(items)
    except TypeError:  # a mapping whose constructor takes other arguments (defaultdict, ...)
        return items


def recursively_apply(func: Callable, data: Any, *args: Any, test_type: Callable[[Any], bool] = is_torch_tensor,
                      error_on_other_type: bool = False, **kwargs: Any) -> Any:
    """Apply ``func`` to every leaf of ``data`` for which ``test_type`` holds.

    Args:
        func: called as ``func(leaf, *args, **kwargs)``.
        data: a leaf, or nested lists, tuples, namedtuples and mappings of them.
        test_type: which leaves ``func`` applies to (tensors by default).
        error_on_other_type: raise ``TypeError`` on any other leaf instead of keeping it.

    Returns the same structure, each matching leaf replaced by ``func``'s result.
    """
    if isinstance(data, (tuple, list)):
        return honor_type(data, (recursively_apply(func, item, *args, test_type=test_type,
                                                   error_on_other_type=error_on_other_type, **kwargs)
                                 for item in data))
    if isinstance(data, Mapping):
        return _same_mapping_type(data, {key: recursively_apply(func, value, *args, test_type=test_type,
                                                                error_on_other_type=error_on_other_type, **kwargs)
                                         for key, value in data.items()})
    if test_type(data):
        return func(data, *args, **kwargs)
    if error_on_other_type:
        # Accelerate's wording, which its users' code matches on
        name = getattr(func, "__name__", repr(func))
        raise TypeError(f"Unsupported types ({type(data)}) passed to `{name}`. Only nested list/tuple/dicts of "
                        f"objects that are valid for `{getattr(test_type, '__name__', repr(test_type))}` "
                        "should be passed.")
    return data


def _map_tensors(function: Callable[[torch.Tensor], Any], data: Any, operation: str) -> Any:
    """``function`` applied to every tensor of ``data``; any other leaf is an ``UnsupportedDataError``
    (a ``TypeError``).

    The collectives' walk: the same as ``recursively_apply(..., error_on_other_type=True)``
    with less work per leaf.
    """
    if isinstance(data, torch.Tensor):
        return function(data)
    if isinstance(data, (tuple, list)):
        mapped = [_map_tensors(function, item, operation) for item in data]
        return mapped if type(data) is list else honor_type(data, mapped)
    if isinstance(data, Mapping):
        return _same_mapping_type(data, {key: _map_tensors(function, value, operation) for key, value in data.items()})
    raise UnsupportedDataError(f"{operation} works on nested lists, tuples and dicts of tensors; it got a "
                               f"{type(data).__name__}. Convert it to a tensor first, or use gather_object for "
                               "arbitrary objects")


def _leaves(data: Any, test_type: Callable[[Any], bool] = is_torch_tensor) -> list[Any]:
    found: list[Any] = []
    recursively_apply(found.append, data, test_type=test_type)
    return found


def send_to_device(tensor: Any, device: Any, non_blocking: bool = False, skip_keys: list[str] | str | None = None) -> Any:
    """Move every tensor of a nested structure to ``device``.

    Args:
        tensor: a tensor, an object with a ``to`` method, or nested lists, tuples and
            mappings of them; other leaves are returned as they are.
        device: the target device.
        non_blocking: asynchronous copy where the device allows it.
        skip_keys: mapping keys whose values stay where they are.

    Tensors already on ``device`` are returned as they are (what ``Tensor.to`` does, for less).
    """
    skipped = [skip_keys] if isinstance(skip_keys, str) else list(skip_keys or ())
    return _send(tensor, _as_device(device), non_blocking, skipped)


def _as_device(device: Any) -> Any:
    """``device`` as a ``torch.device`` where torch knows the name (compared cheaply)."""
    if isinstance(device, (str, int)):
        try:
            return torch.device(device)
        except (RuntimeError, TypeError):  # a name torch does not know: let ``to`` decide
            return device
    return device


def _move_tensor(tensor: torch.Tensor, device: Any, non_blocking: bool) -> torch.Tensor:
    if tensor.device == device:
        return tensor
    return tensor.to(device, non_blocking=non_blocking) if non_blocking else tensor.to(device)


def _send(data: Any, device: Any, non_blocking: bool, skipped: list[Any]) -> Any:
    if isinstance(data, torch.Tensor):
        return _move_tensor(data, device, non_blocking)
    if isinstance(data, (tuple, list)):
        moved = [_move_tensor(item, device, non_blocking) if isinstance(item, torch.Tensor)
                 else _send(item, device, non_blocking, skipped) for item in data]
        return moved if type(data) is list else honor_type(data, moved)
    if isinstance(data, Mapping) and (skipped or not hasattr(data, "to")):
        return _same_mapping_type(data, {key: value if key in skipped else _send(value, device, non_blocking, skipped)
                                         for key, value in data.items()})
    if hasattr(data, "to"):
        try:
            return data.to(device, non_blocking=non_blocking)
        except TypeError:  # a ``to`` without ``non_blocking``
            return data.to(device)
    return data


def get_data_structure(data: Any) -> Any:
    """The structure of ``data`` with every tensor replaced by its :class:`TensorInformation`."""
    return recursively_apply(lambda tensor: TensorInformation(shape=tensor.shape, dtype=tensor.dtype), data)


def get_shape(data: Any) -> Any:
    """The structure of ``data`` with every tensor replaced by its shape as a list."""
    return recursively_apply(lambda tensor: list(tensor.shape), data)


def initialize_tensors(data_structure: Any) -> Any:
    """Empty tensors laid out as ``data_structure`` (the result of :func:`get_data_structure`)."""
    return recursively_apply(lambda info: torch.empty(info.shape, dtype=info.dtype), data_structure,
                             test_type=is_tensor_information)


def find_batch_size(data: Any) -> int:
    """The size of the first dimension of the first tensor found in ``data``.

    Raises ``ValueError`` on an empty container and ``TypeError`` when the first leaf is not
    a tensor.
    """
    if isinstance(data, (tuple, list, Mapping)) and len(data) == 0:
        raise ValueError(f"cannot find a batch size in an empty {type(data).__name__}")
    if isinstance(data, (tuple, list)):
        return find_batch_size(data[0])
    if isinstance(data, Mapping):
        return find_batch_size(next(iter(data.values())))
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"the batch size is read from tensors; found a {type(data).__name__}")
    return data.shape[0]


def ignorant_find_batch_size(data: Any) -> int | None:
    """Like :func:`find_batch_size`, but ``None`` where it would raise."""
    try:
        return find_batch_size(data)
    except (ValueError, TypeError, IndexError):
        return None


def listify(data: Any) -> Any:
    """Every tensor of ``data`` turned into (nested) Python lists or numbers."""

    def to_list(tensor: torch.Tensor) -> Any:
        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:  # no numpy/Python counterpart
            tensor = tensor.to(torch.float32)
        return tensor.tolist()

    return recursively_apply(to_list, data)


def find_device(data: Any, *more: Any) -> torch.device | None:
    """The device of the first tensor found in ``data`` (and ``more``), or ``None``."""
    if more:
        data = (data, *more)
    if isinstance(data, torch.Tensor):
        return data.device
    if isinstance(data, Mapping):
        data = list(data.values())
    if isinstance(data, (tuple, list)):
        for item in data:
            device = find_device(item)
            if device is not None:
                return device
    return None


def slice_tensors(data: Any, tensor_slice: slice | int, process_index: int | None = None,
                  num_processes: int | None = None) -> Any:
    """Index every tensor of ``data`` with ``tensor_slice`` (the last two arguments are for
    custom slicing functions with the same signature and are unused here)."""
    return recursively_apply(lambda tensor: tensor[tensor_slice], data)


def concatenate(data: list[Any], dim: int = 0) -> Any:
    """Concatenate a list of structures that share one layout, tensor by tensor, along ``dim``.

    A list of one element is returned as that element, whatever it is (one batch needs no joining).
    """
    if len(data) == 1:
        return data[0]
    first = data[0]
    if isinstance(first, (tuple, list)):
        return honor_type(first, (concatenate([item[i] for item in data], dim=dim) for i in range(len(first))))
    if isinstance(first, Mapping):
        return _same_mapping_type(first, {key: concatenate([item[key] for item in data], dim=dim) for key in first})
    if not isinstance(first, torch.Tensor):
        raise TypeError(f"concatenate works on lists of (nested structures of) tensors; it got a {type(first).__name__}")
    return torch.cat(data, dim=dim)


_HALF = (torch.float16, torch.bfloat16)


def convert_to_fp32(tensor: Any) -> Any:
    """Every half-precision (float16 or bfloat16) tensor of ``tensor`` converted to float32."""
    if type(tensor) is torch.Tensor:  # a model's usual output, on every step: no structure to walk
        return tensor.float() if tensor.dtype in _HALF else tensor
    return recursively_apply(lambda t: t.float(), tensor,
                             test_type=lambda t: isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16))


class ConvertOutputsToFp32:
    """Wraps a forward function so that its outputs come back in float32."""

    def __init__(self, model_forward: Callable) -> None:
        self.model_forward = model_forward
        functools.update_wrapper(self, model_forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return convert_to_fp32(self.model_forward(*args, **kwargs))


def convert_outputs_to_fp32(model_forward: Any) -> Any:
    """Wrap a forward function so its half-precision outputs come back in float32.

    Given data instead of a callable, converts it directly (as :func:`convert_to_fp32`).
    """
    if not callable(model_forward):
        return convert_to_fp32(model_forward)
    wrapped = ConvertOutputsToFp32(model_forward)

    @functools.wraps(model_forward)
    def forward(*args: Any, **kwargs: Any) -> Any:
        return wrapped(*args, **kwargs)

    forward.__wrapped__ = wrapped  # type: ignore[attr-defined]
    return forward


def pad_input_tensors(tensor: Any, batch_size: int, num_processes: int, dim: int = 0) -> Any:
    """Pad every tensor along ``dim`` with zeros so its size is a multiple of ``num_processes``
    (so that a batch of ``batch_size`` can be split evenly)."""

    def pad_one(one: torch.Tensor) -> torch.Tensor:
        if one.dim() <= dim:
            return one
        target = math.ceil(one.shape[dim] / num_processes) * num_processes
        if target == one.shape[dim]:
            return one
        shape = list(one.shape)
        shape[dim] = target
        padded = one.new_zeros(shape)
        where = [slice(None)] * one.dim()
        where[dim] = slice(0, one.shape[dim])
        padded[tuple(where)] = one
        return padded

    return recursively_apply(pad_one, tensor)


__all__ = [
    "TensorInformation",
    "is_torch_tensor",
    "is_tensor_information",
    "is_namedtuple",
    "honor_type",
    "recursively_apply",
    "send_to_device",
    "get_data_structure",
    "get_shape",
    "initialize_tensors",
    "find_batch_size",
    "ignorant_find_batch_size",
    "listify",
    "find_device",
    "slice_tensors",
    "concatenate",
    "convert_to_fp32",
    "ConvertOutputsToFp32",
    "convert_outputs_to_fp32",
    "pad_input_tensors",
]
