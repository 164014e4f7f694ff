"""Operations on nested structures of tensors, within one process and across processes.

Every function here accepts a tensor or any nesting of lists, tuples, namedtuples and
mappings of tensors, and returns the same structure. The cross-process operations
(:func:`gather`, :func:`broadcast`, :func:`reduce`, :func:`pad_across_processes`, the object
collectives) go through the run's collectives object (``PartialState().collectives``), which
the communication plugin provides: torch.distributed by default, a platform's own runtime
(XLA, say) where it replaces it. On a single process they return their input.

Processes that pass different shapes or dtypes to one collective make the backend abort, hang
or return garbage, and only an exchange of each rank's layout before the data moves can tell.
That exchange costs about as much as a small collective itself (``benchmarks/
bench_collective_checks.py``), so it is made where an exchange happens anyway:
:func:`pad_across_processes` sends every rank's layout with its sizes and always checks it. In
debug mode (``DRIVETRAIN_DEBUG_MODE=1``) every collective first compares what each process
passes. Either way a mismatch raises :class:`DistributedOperationException` on every process.
Outside debug mode a backend failure inside :func:`gather`, :func:`reduce` or :func:`broadcast`
is reported as one line that points to debug mode.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import warnings
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..collectives import REDUCTIONS
from ..errors import DistributedError
from ..state import GradientState, PartialState
from ..public_names import contributed_getattr

logger = logging.getLogger(__name__)


class DistributedOperationException(DistributedError):
    """The processes called a collective with data that cannot work together."""


class CannotPadNestedTensorWarning(UserWarning):
    """``pad_across_processes`` met a nested tensor: it is returned unpadded."""


# ----------------------------------------------------------------- structure helpers


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
        name = getattr(func, "__name__", repr(func))
        raise TypeError(f"{name} works on nested lists, tuples and dicts of tensors; it got a {type(data).__name__}. "
                        f"Convert it to a tensor first, or use gather_object for arbitrary objects")
    return data


def _map_tensors(function: Callable[[torch.Tensor], Any], data: Any, operation: str) -> Any:
    """``function`` applied to every tensor of ``data``; any other leaf is a ``TypeError``.

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
    raise TypeError(f"{operation} works on nested lists, tuples and dicts of tensors; it got a {type(data).__name__}. "
                    f"Convert it to a tensor first, or use gather_object for arbitrary objects")


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
    """Concatenate a list of structures that share one layout, tensor by tensor, along ``dim``."""
    first = data[0]
    if isinstance(first, (tuple, list)):
        return honor_type(first, (concatenate([item[i] for item in data], dim=dim) for i in range(len(first))))
    if isinstance(first, Mapping):
        return _same_mapping_type(first, {key: concatenate([item[key] for item in data], dim=dim) for key in first})
    if not isinstance(first, torch.Tensor):
        raise TypeError(f"concatenate works on lists of (nested structures of) tensors; it got a {type(first).__name__}")
    return torch.cat(data, dim=dim)


def convert_to_fp32(tensor: Any) -> Any:
    """Every half-precision (float16 or bfloat16) tensor of ``tensor`` converted to float32."""
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


# --------------------------------------------------------------- across processes


def _collectives() -> Any:
    run = PartialState._shared_state.get("run")
    if run is None:
        run = PartialState().run
    return run.collectives


def _debug_mode() -> bool:
    return bool(PartialState._shared_state.get("debug", False))


def _describe(data: Any, dims_only: bool = False) -> Any:
    """A picklable description of ``data``: each tensor as ``"[2, 3] float32"``."""
    if isinstance(data, (tuple, list)):
        return [_describe(item, dims_only) for item in data]
    if isinstance(data, Mapping):
        return {str(key): _describe(value, dims_only) for key, value in data.items()}
    if isinstance(data, torch.Tensor):
        dtype = str(data.dtype).replace("torch.", "")
        return f"{data.dim()}-d {dtype}" if dims_only else f"{list(data.shape)} {dtype}"
    return type(data).__name__


def _check_same_everywhere(operation: str, data: Any, collectives: Any, dims_only: bool = False) -> None:
    """Debug mode: make sure every process passes the same layout, or fail on all of them."""
    described = collectives.all_gather_object(_describe(data, dims_only))
    if all(item == described[0] for item in described):
        return
    ranks = "; ".join(f"rank {rank}: {item}" for rank, item in enumerate(described))
    hint = ("" if dims_only else
            "; pad a ragged dimension first with pad_across_processes, or use gather_object for arbitrary data")
    raise DistributedOperationException(
        f"{operation}() needs {_SAME[dims_only]} on every process, but they differ (debug mode): {ranks}. "
        f"Call {operation}() with matching tensors on every rank{hint}"
    )


_SAME = {False: "the same shapes and dtypes", True: "the same structure, number of dimensions and dtypes"}
_FIND_WHICH = "run with --debug (ACCELERATE_DEBUG_MODE=1) to find which"


def _backend_failure(operation: str, error: DistributedError) -> DistributedOperationException:
    """The one line for a collective the backend could not complete (checked only in debug mode)."""
    return DistributedOperationException(
        f"{operation}() failed across processes ({error}): the ranks passed tensors of different shapes/dtypes "
        f"to {operation}(), or one of them stopped; {_FIND_WHICH}"
    )


def verify_operation(function: Callable) -> Callable:
    """Decorator for a collective on nested tensors: in debug mode, check first that every
    process passes tensors of the same shapes and dtypes (see module docs)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _debug_mode():
            collectives = _collectives()
            if collectives.world_size > 1:
                data = kwargs["tensor"] if "tensor" in kwargs else args[0]
                _check_same_everywhere(function.__name__, data, collectives)
        return function(*args, **kwargs)

    return wrapper


def chained_operation(function: Callable) -> Callable:
    """Decorator for an operation built on other collectives: a mismatch found inside names
    the outer operation too."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except DistributedOperationException as error:
            raise DistributedOperationException(f"in {function.__name__}(): {error}") from error

    return wrapper


def gather(tensor: Any) -> Any:
    """Every process's tensors concatenated along the first dimension, on every process.

    ``tensor`` may be nested lists, tuples and dicts of tensors; each must have the same
    shape on every process (see :func:`pad_across_processes`). A 0-dimensional tensor
    gathers into a 1-dimensional one. Returns ``tensor`` itself on a single process.
    """
    collectives = _collectives()
    if collectives.world_size == 1:
        return tensor
    if _debug_mode():
        _check_same_everywhere("gather", tensor, collectives)
    try:
        return _map_tensors(collectives.all_gather_into, tensor, "gather")
    except DistributedError as error:
        raise _backend_failure("gather", error) from error


def gather_object(object: Any) -> list[Any]:
    """Every process's picklable ``object``, on every process.

    A list (or tuple) from each process gives one list of all their items, in rank order;
    any other object gives the list of each process's object. On a single process a list
    is returned as it is and another object as ``[object]``.
    """
    collectives = _collectives()
    if collectives.world_size == 1:
        return object if isinstance(object, (list, tuple)) else [object]
    gathered = collectives.all_gather_object(object)
    if all(isinstance(part, (list, tuple)) for part in gathered):
        return [item for part in gathered for item in part]
    return gathered


def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """Process ``from_process``'s tensors copied into ``tensor`` on every process (in place).

    ``tensor`` may be nested lists, tuples and dicts of tensors, of the same shapes and
    dtypes on every process. Returns ``tensor``.
    """
    collectives = _collectives()
    if collectives.world_size == 1:
        return tensor
    if _debug_mode():
        _check_same_everywhere("broadcast", tensor, collectives)
    try:
        if isinstance(tensor, torch.Tensor):
            return collectives.broadcast(tensor, src=from_process)
        return _map_tensors(lambda one: collectives.broadcast(one, src=from_process), tensor, "broadcast")
    except DistributedError as error:
        raise _backend_failure("broadcast", error) from error


def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """Process ``from_process``'s list of picklable objects copied into ``object_list`` on
    every process (in place; the list has the same length everywhere). Returns it."""
    collectives = _collectives()
    if collectives.world_size == 1:
        return object_list
    return collectives.broadcast_object_list(object_list, src=from_process)


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """Combine every process's tensors element-wise; the input is left untouched.

    Args:
        tensor: nested lists, tuples and dicts of tensors of the same shapes on every process.
        reduction: ``"mean"`` or ``"sum"`` (``"max"``, ``"min"`` and ``"product"`` too).
        scale: a factor applied to the result.

    Returns new tensors (also on a single process, where the reduction is the identity).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction={reduction!r} is not one of {', '.join(REDUCTIONS)}")
    collectives = _collectives()
    if collectives.world_size == 1:
        collectives = None
    elif _debug_mode():
        _check_same_everywhere("reduce", tensor, collectives)
    try:
        if isinstance(tensor, torch.Tensor):
            return _reduce_one(tensor, collectives, reduction, scale)
        return _map_tensors(lambda one: _reduce_one(one, collectives, reduction, scale), tensor, "reduce")
    except DistributedError as error:
        raise _backend_failure("reduce", error) from error


def _reduce_one(tensor: torch.Tensor, collectives: Any, reduction: str, scale: float) -> torch.Tensor:
    result = tensor.clone()
    if collectives is not None:
        result = collectives.all_reduce(result, reduction)
    return result if scale == 1.0 else result * scale


def pad_across_processes(tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
    """Pad every tensor along ``dim`` to its largest size across processes, so it can be gathered.

    Args:
        tensor: nested lists, tuples and dicts of tensors; the same structure and number of
            dimensions on every process (tensors with fewer than ``dim + 1`` dimensions are
            returned unchanged).
        dim: the dimension to pad.
        pad_index: the value the padding is filled with.
        pad_first: pad at the start instead of the end.

    The sizes travel in one collective (up to 14 tensors; a second one for more), with a
    digest of each process's layout: processes whose structures, numbers of dimensions or
    dtypes differ raise :class:`DistributedOperationException` on every process, debug mode
    or not.
    """
    collectives = _collectives()
    if collectives.world_size == 1:
        return tensor
    if _debug_mode():
        _check_same_everywhere("pad_across_processes", tensor, collectives, dims_only=True)
    tensors = _leaves(tensor)
    largest = _largest_sizes(tensor, tensors, dim, collectives)
    if not tensors:
        return tensor
    position = iter(range(len(tensors)))

    def pad_one(one: torch.Tensor) -> torch.Tensor:
        target = largest[next(position)]
        if one.is_nested:
            warnings.warn("nested tensors cannot be padded; returning it unpadded", CannotPadNestedTensorWarning)
            return one
        if not -one.dim() <= dim < one.dim() or target == one.shape[dim]:
            return one
        axis = dim % one.dim()
        shape = list(one.shape)
        shape[axis] = target
        padded = one.new_full(shape, pad_index)
        where = [slice(None)] * one.dim()
        where[axis] = slice(target - one.shape[axis], target) if pad_first else slice(0, one.shape[axis])
        padded[tuple(where)] = one
        return padded

    return recursively_apply(pad_one, tensor)


# Sizes that travel in pad_across_processes's first exchange. Each rank's row has the same length
# whatever its structure, so a rank with more tensors cannot break the exchange that finds it.
_PAD_INLINE_SIZES = 14


def _layout_digest(description: Any) -> int:
    """A number that two processes compute alike for equal layouts (unlike ``hash`` of a
    string, which each process salts)."""
    return int.from_bytes(hashlib.blake2b(repr(description).encode(), digest_size=7).digest(), "little")


def _largest_sizes(data: Any, tensors: list[torch.Tensor], dim: int, collectives: Any) -> list[int]:
    """Each tensor's largest size along ``dim`` across processes (-1 where it lacks the
    dimension), after checking that every process passes the same layout."""
    sizes = [t.shape[dim] if -t.dim() <= dim < t.dim() else -1 for t in tensors]
    inline = sizes[:_PAD_INLINE_SIZES]
    row = [len(tensors), _layout_digest(_describe(data, dims_only=True)), *inline,
           *[0] * (_PAD_INLINE_SIZES - len(inline))]
    device = tensors[0].device if tensors else PartialState().device
    rows = collectives.all_gather_into(torch.tensor(row, dtype=torch.int64, device=device))
    rows = rows.reshape(collectives.world_size, -1).cpu()
    # Every rank sees every row, so all of them raise or none does.
    differing = [str(rank) for rank in range(collectives.world_size) if not torch.equal(rows[rank, :2], rows[0, :2])]
    if differing:
        raise DistributedOperationException(
            f"pad_across_processes() needs {_SAME[True]} on every process, but rank {', '.join(differing)} passed "
            f"a different layout from rank 0; run with --debug (ACCELERATE_DEBUG_MODE=1) to see each rank's tensors")
    all_sizes = rows[:, 2:2 + len(inline)]
    if len(sizes) > _PAD_INLINE_SIZES:  # as many tensors everywhere: the rest exchange evenly
        rest = torch.tensor(sizes[_PAD_INLINE_SIZES:], dtype=torch.int64, device=device)
        rest = collectives.all_gather_into(rest).reshape(collectives.world_size, -1).cpu()
        all_sizes = torch.cat([all_sizes, rest], dim=1)
    return all_sizes.max(dim=0).values.tolist()


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


def copy_tensor_to_devices(tensor: torch.Tensor | None = None) -> torch.Tensor:
    """Process 0's ``tensor`` on every process (the others pass ``None`` or anything)."""
    collectives = _collectives()
    if collectives.world_size == 1:
        return tensor
    info = collectives.broadcast_object_list([get_data_structure(tensor) if collectives.rank == 0 else None])[0]
    device = PartialState().device
    buffer = tensor.to(device) if collectives.rank == 0 else torch.empty(info.shape, dtype=info.dtype, device=device)
    return collectives.broadcast(buffer.contiguous(), src=0)


def wait_for_everyone() -> None:
    """Block until every process reaches this call."""
    PartialState().wait_for_everyone()


# ----------------------------------------------------------------- metrics


def _only_tensors(data: Any) -> bool:
    try:
        recursively_apply(lambda t: t, data, error_on_other_type=True)
    except TypeError:
        return False
    return True


@chained_operation
def gather_for_metrics(input_data: Any, use_gather_object: bool = False) -> Any:
    """Gather ``input_data`` from every process for computing metrics, dropping the samples
    that the data loader repeated to give every process a full last batch.

    Within the last batch of a prepared data loader, the result is cut to the samples that
    really belong to the dataset, so an evaluation loop sees each sample exactly once.
    Anything that is not a nested structure of tensors (or ``use_gather_object=True``) is
    gathered with :func:`gather_object`.
    """
    use_gather_object = use_gather_object or not _only_tensors(input_data)
    data = gather_object(input_data) if use_gather_object else gather(input_data)
    state = GradientState()
    if not state.end_of_dataloader:
        return data
    remainder = state.remainder
    if remainder == -1:
        logger.info("the data loader's dataset has no length, so gather_for_metrics cannot drop the samples "
                    "repeated in the last batch; drop them yourself")
        return data
    if remainder <= 0:
        return data
    if use_gather_object:
        return data[:remainder]
    return recursively_apply(lambda tensor: tensor[:remainder], data)


__all__ = [
    "DistributedOperationException", "TensorInformation", "is_torch_tensor", "is_tensor_information", "is_namedtuple",
    "honor_type", "recursively_apply", "send_to_device", "get_data_structure", "get_shape", "initialize_tensors",
    "find_batch_size", "ignorant_find_batch_size", "listify", "find_device", "slice_tensors", "concatenate",
    "convert_to_fp32", "ConvertOutputsToFp32", "convert_outputs_to_fp32", "verify_operation", "chained_operation",
    "gather", "gather_object", "broadcast", "broadcast_object_list", "reduce", "pad_across_processes",
    "pad_input_tensors", "copy_tensor_to_devices", "wait_for_everyone", "gather_for_metrics",
]


# names a plugin contributes to this module (keys "utils.operations.<name>"), served on first access
__getattr__ = contributed_getattr(__name__)
