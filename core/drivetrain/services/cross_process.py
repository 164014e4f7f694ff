"""Operations on nested structures of tensors across processes.

Each function accepts a tensor or any nesting of lists, tuples, namedtuples and mappings of
tensors (walked by :mod:`drivetrain.tensors.nested`), and returns the same structure. The
operations (:func:`gather`, :func:`broadcast`, :func:`reduce`, :func:`pad_across_processes`, the object
collectives) go through the run's collectives object (``PartialState().collectives``), which
the communication plugin provides: torch.distributed by default, a platform's own runtime
(XLA, say) where it replaces it. On a single process they return their input.

Processes that pass different shapes or dtypes to one collective make the backend abort, hang
or return garbage, and only an exchange of each rank's layout before the data moves can tell.
That exchange costs about as much as a small collective itself (``benchmarks/
bench_collective_checks.py``), so it is made where an exchange happens anyway:
:func:`pad_across_processes` sends every rank's layout with its sizes and always checks it, and
:func:`gather` and :func:`reduce` compare a digest of each rank's layout before a tensor of at
least :data:`LAYOUT_CHECK_BYTES` on the CPU moves (where one more small collective is lost in
the payload's time). In debug mode (``--debug``, ``DRIVETRAIN_DEBUG_MODE=1``) every collective
first compares what each process passes. Either way a mismatch raises
:class:`DistributedOperationException` on every process.
Outside debug mode a backend failure inside :func:`gather`, :func:`reduce` or :func:`broadcast`
is reported as one line that points to debug mode.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import warnings
import zlib
from collections.abc import Mapping
from typing import Any, Callable

import torch

from ..runtime.collective_watch import watched as _watched_as
from ..runtime.collectives import REDUCTIONS
from ..kernel.errors import DistributedError
from ..runtime.state import GradientState, PartialState
from ..tensors.nested import (
    _leaves,
    _map_tensors,
    get_data_structure,
    recursively_apply,
)

logger = logging.getLogger(__name__)


class DistributedOperationException(DistributedError):
    """The processes called a collective with data that cannot work together."""

    #: Every rank raises it, naming each rank's tensors: no hang report is needed.
    collective_report = False


class CannotPadNestedTensorWarning(UserWarning):
    """``pad_across_processes`` met a nested tensor: it is returned unpadded."""


# --------------------------------------------------------------- across processes


def watched(operation: str) -> Callable[[Callable], Callable]:
    """Decorator: the operation notes itself while it runs, so a hang report names it (with the
    backend's own collective inside it; :mod:`drivetrain.runtime.collective_watch`)."""
    return lambda function: _watched_as(operation, function)


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


def _check_same_everywhere(operation: str, data: Any, collectives: Any, dims_only: bool = False,
                           found_by: str = "debug mode") -> None:
    """Make sure every process passes the same layout, or fail on all of them (debug mode, or
    after the layout digests of a large gather differed)."""
    described = collectives.all_gather_object(_describe(data, dims_only))
    if all(item == described[0] for item in described):
        return
    ranks = "; ".join(f"rank {rank}: {item}" for rank, item in enumerate(described))
    hint = ("" if dims_only else
            "; pad a ragged dimension first with pad_across_processes, or use gather_object for arbitrary data")
    raise DistributedOperationException(
        f"{operation}() needs {_SAME[dims_only]} on every process, but they differ ({found_by}): {ranks}. "
        f"Call {operation}() with matching tensors on every rank{hint}"
    )


_SAME = {False: "the same shapes and dtypes", True: "the same structure, number of dimensions and dtypes"}
_FIND_WHICH = "run with --debug (ACCELERATE_DEBUG_MODE=1) to find which"


def _backend_failure(operation: str, error: DistributedError) -> DistributedOperationException:
    """The one line for a collective the backend could not complete (checked only in debug mode)."""
    failure = DistributedOperationException(
        f"{operation}() failed across processes ({error}): the ranks passed tensors of different shapes/dtypes "
        f"to {operation}(), or one of them stopped; {_FIND_WHICH}"
    )
    failure.collective_report = True  # a rank stopped, or the backend failed: the hang report says which
    return failure


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


@watched("gather")
def gather(tensor: Any) -> Any:
    """Every process's tensors concatenated along the first dimension, on every process.

    ``tensor`` may be nested lists, tuples and dicts of tensors; each must have the same
    shape on every process (see :func:`pad_across_processes`). A 0-dimensional tensor
    gathers into a 1-dimensional one. Returns ``tensor`` itself on a single process.
    """
    collectives = _collectives()
    if collectives.world_size == 1:
        if not isinstance(tensor, (torch.Tensor, list, tuple, Mapping)):
            _map_tensors(_unchanged, tensor, "gather")  # refused on one process as on two (raises)
        return tensor
    if _debug_mode():
        _check_same_everywhere("gather", tensor, collectives)
        gather_one = collectives.all_gather_into
    else:
        def gather_one(one: torch.Tensor) -> torch.Tensor:
            if one.nbytes >= LAYOUT_CHECK_BYTES and one.device.type == "cpu":
                _compare_layout_digests("gather", tensor, one, collectives)
            return collectives.all_gather_into(one)
    try:
        return _map_tensors(gather_one, tensor, "gather")
    except DistributedOperationException:
        raise
    except DistributedError as error:
        raise _backend_failure("gather", error) from error


#: A gathered or reduced tensor of at least this many bytes, on the CPU, has every rank's layout
#: compared first, debug mode or not: another all-gather, of 8 bytes, lost in the payload's own time
#: (``benchmarks/bench_collectives.py``). Tensors of the same size but other shapes would
#: otherwise be gathered into a wrong result; smaller ones (where that all-gather would cost as
#: much as the gather) and tensors on an accelerator (reading the digests waits for the device)
#: are compared in debug mode (``--debug``).
LAYOUT_CHECK_BYTES = 16 << 20


def _unchanged(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def _compare_layout_digests(operation: str, data: Any, tensor: torch.Tensor, collectives: Any) -> None:
    """Every rank's shape and dtype of ``tensor`` (a part of ``data``) in one all-gather of a
    digest; when they differ, every rank raises naming each one's layout of ``data``."""
    digest = zlib.crc32(f"{list(tensor.shape)} {tensor.dtype}".encode())
    digests = collectives.all_gather_into(torch.tensor([digest], dtype=torch.int64)).tolist()
    if any(other != digests[0] for other in digests):
        _check_same_everywhere(operation, data, collectives, found_by="their layout digests")


@watched("gather_object")
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


@watched("broadcast")
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


@watched("broadcast_object_list")
def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """Process ``from_process``'s list of picklable objects copied into ``object_list`` on
    every process (in place; the list has the same length everywhere). Returns it."""
    collectives = _collectives()
    if collectives.world_size == 1:
        return object_list
    return collectives.broadcast_object_list(object_list, src=from_process)


@watched("reduce")
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
    except DistributedOperationException:
        raise
    except DistributedError as error:
        raise _backend_failure("reduce", error) from error


def _reduce_one(tensor: torch.Tensor, collectives: Any, reduction: str, scale: float) -> torch.Tensor:
    result = tensor.clone()
    if collectives is not None:
        if result.nbytes >= LAYOUT_CHECK_BYTES and result.device.type == "cpu" and not _debug_mode():
            _compare_layout_digests("reduce", tensor, tensor, collectives)
        result = collectives.all_reduce(result, reduction)
    return result if scale == 1.0 else result * scale


@watched("pad_across_processes")
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
    # warned on one process too: the same code would meet the nested tensor on several
    if any(leaf.is_nested for leaf in _leaves(tensor)):
        warnings.warn("pad_across_processes cannot pad nested tensors; they are returned unpadded",
                      CannotPadNestedTensorWarning, stacklevel=2)
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
    # a nested tensor has no sizes to exchange: it counts as lacking the dimension
    sizes = [t.shape[dim] if not t.is_nested and -t.dim() <= dim < t.dim() else -1 for t in tensors]
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


def copy_tensor_to_devices(tensor: torch.Tensor | None = None) -> torch.Tensor:
    """Process 0's ``tensor`` on every process (the others pass ``None`` or anything)."""
    collectives = _collectives()
    if collectives.world_size == 1:
        return tensor
    info = collectives.broadcast_object_list([get_data_structure(tensor) if collectives.rank == 0 else None])[0]
    device = PartialState().device
    buffer = tensor.to(device) if collectives.rank == 0 else torch.empty(info.shape, dtype=info.dtype, device=device)
    return collectives.broadcast(buffer.contiguous(), src=0)


@watched("wait_for_everyone")
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
    "DistributedOperationException",
    "CannotPadNestedTensorWarning",
    "verify_operation",
    "chained_operation",
    "gather",
    "gather_object",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "pad_across_processes",
    "copy_tensor_to_devices",
    "wait_for_everyone",
    "gather_for_metrics",
]

