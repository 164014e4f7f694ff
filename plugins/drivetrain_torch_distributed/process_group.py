"""The default process group and its collectives."""

from __future__ import annotations

import atexit
import functools
import logging
import os
import re
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from drivetrain.plugin_api import DistributedError, watch_module_functions

logger = logging.getLogger(__name__)

_REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "product": dist.ReduceOp.PRODUCT,
}


# torch 2.13 renamed all_gather_into_tensor (still there, deprecated) to all_gather_single.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


# dtypes gloo cannot move or reduce: moved as raw bytes, reduced in a wider type.
_GLOO_MISSING = frozenset(
    dtype for dtype in (getattr(torch, name, None) for name in (
        "int16", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"))
    if dtype is not None
)


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's memory as a flat uint8 tensor (shares the memory)."""
    return tensor.reshape(-1).view(torch.uint8)


def group_is_ready() -> bool:
    return dist.is_available() and dist.is_initialized()


def attempt_store(timeout: timedelta | None) -> Any:
    """The store of this attempt when torch's elastic agent hosts the store, else ``None``.

    The agent keeps one store for the whole job and its workers connect to it without a
    prefix of their own, so after a restart a new group would read the keys the failed
    attempt left there (the old ranks' gloo addresses: "Connection refused", or a wait for a
    peer that is gone). Every attempt gets its own key space, named by the restart count.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or "MASTER_PORT" not in os.environ:
        return None
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    client = dist.TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"]),
                           is_master=False, timeout=timeout or timedelta(minutes=30))
    return dist.PrefixStore(f"drivetrain/attempt{attempt}/", client)


def init_process_group(run: Any, timeout: timedelta | None, backend: str | None, init_method: str | None) -> None:
    """Create the default group from the cluster environment's rank and rendezvous address."""
    if group_is_ready():
        return
    cluster = run.selection.cluster
    cluster.export()  # env:// reads MASTER_ADDR/PORT, RANK, WORLD_SIZE
    backend = backend or run.platform.default_backend
    kwargs: dict[str, Any] = {
        "backend": backend,
        "init_method": init_method or "env://",
        "rank": cluster.rank,
        "world_size": cluster.world_size,
    }
    if timeout is not None:
        kwargs["timeout"] = timeout
    if run.platform.device_type != "cpu" and backend not in ("gloo", "mpi"):
        kwargs["device_id"] = run.platform.device_for(cluster.local_rank)
    try:
        store = attempt_store(timeout) if init_method is None else None
        if store is not None:
            del kwargs["init_method"]
            kwargs["store"] = store
        dist.init_process_group(**kwargs)
    except Exception as exc:
        raise DistributedError(
            f"rank {cluster.rank} could not join the process group ({backend}, "
            f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}): {exc}; check that every "
            "process got the same --main-process-ip/--main-process-port and that the port is free"
        ) from exc
    logger.debug("rank %d/%d joined the %s process group", cluster.rank, cluster.world_size, backend)
    watch_collectives()
    if backend == "gloo":
        # A gloo group still alive at interpreter exit sometimes aborts the process
        # ("terminate called without an active exception") and fails a finished job.
        atexit.register(_destroy_at_exit)


#: The collectives of ``torch.distributed`` a hang report names when the script (or a library
#: through ``torch.distributed.<name>``) is inside one.
WATCHED_COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "barrier", "monitored_barrier", "reduce", "gather", "scatter",
    "all_to_all", "all_to_all_single", "all_gather_object", "broadcast_object_list", "gather_object",
    "scatter_object_list",
)


def _group_ranks(group: Any) -> list[int] | None:
    if group is None or group is dist.GroupMember.WORLD:
        return None
    return list(dist.get_process_group_ranks(group))


def watch_collectives() -> None:
    """Note every ``torch.distributed`` collective while it runs (a hung one is then named):
    the module's functions are replaced in this process, once; each call costs a list push and pop."""
    global _all_gather_single
    watch_module_functions(dist, WATCHED_COLLECTIVES, _group_ranks)
    _all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _destroy_at_exit() -> None:
    try:
        if group_is_ready():
            dist.destroy_process_group()
    except Exception:  # the job is over: a peer may be gone already
        pass


def _backend_failures(method: Any) -> Any:
    """Turn a failure inside the backend's collective into a one-line ``DistributedError``.

    Processes that disagree on shapes make gloo abort one of them and leave the others a
    "Read error" traceback; the caller names the operation and the likely cause.
    """

    @functools.wraps(method)
    def wrapper(self: "TorchCollectives", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except DistributedError:
            raise
        except RuntimeError as exc:
            lines = str(exc).strip().splitlines() or [type(exc).__name__]
            # keep the reason: drop the C++ source location before it and gloo's generic advice after
            reason = re.sub(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*", "", lines[0]).split(" This is typically")[0]
            raise DistributedError(f"{self.backend} {method.__name__}: {reason}") from exc

    return wrapper


class TorchCollectives:
    """Collectives of the default torch.distributed group."""

    def __init__(self) -> None:
        self.world_size = dist.get_world_size()
        self.rank = dist.get_rank()
        self.backend = dist.get_backend()
        self._missing = _GLOO_MISSING if self.backend == "gloo" else frozenset()
        self._flag_group: Any = None  # start_flag_max's own gloo group, made on first use
        self._flag_options: Any = None

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        gathered = self.all_gather_into(tensor.reshape(1, *tensor.shape))
        return list(gathered.unbind(0))

    @_backend_failures
    def all_gather_into(self, tensor: torch.Tensor) -> torch.Tensor:
        """All processes' tensors concatenated along dim 0, in one call.

        The result is new data without autograd history: the backend writes into views of
        it, which autograd refuses when the input requires grad (a parameter, say).
        """
        tensor = tensor.detach().contiguous()
        if tensor.dim() == 0:
            tensor = tensor.reshape(1)
        shape = list(tensor.shape)
        shape[0] *= self.world_size
        if tensor.dtype in self._missing:
            moved = tensor.new_empty(self.world_size * tensor.numel() * tensor.element_size(), dtype=torch.uint8)
            _all_gather_single(moved, _as_bytes(tensor))
            return moved.view(tensor.dtype).reshape(shape)
        out = tensor.new_empty(shape)
        _all_gather_single(out, tensor)
        return out

    @_backend_failures
    def all_reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        if tensor.dtype in self._missing:
            wider = tensor.to(torch.float32 if tensor.is_floating_point() else torch.int64)
            tensor.copy_(self.all_reduce(wider, reduction))
            return tensor
        if reduction == "mean":
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            if tensor.is_floating_point() or tensor.is_complex():
                tensor.div_(self.world_size)
            else:
                tensor.copy_(torch.div(tensor, self.world_size, rounding_mode="floor"))
            return tensor
        dist.all_reduce(tensor, op=_REDUCE_OPS[reduction])
        return tensor

    @_backend_failures
    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        # Written through a detached alias (same memory): a broadcast is data, not a step autograd
        # could differentiate, and an in-place copy into a parameter's view would be refused.
        # (a tensor without grad is its own alias: no new tensor object on every call)
        target = tensor.detach() if tensor.requires_grad else tensor
        if target.dtype in self._missing:
            buffer = target.contiguous()
            dist.broadcast(_as_bytes(buffer), src=src)
            if buffer is not target:
                target.copy_(buffer)
        elif target.is_contiguous():
            dist.broadcast(target, src=src)
        else:  # the backends need contiguous memory; the result still lands in ``tensor``
            buffer = target.contiguous()
            dist.broadcast(buffer, src=src)
            target.copy_(buffer)
        return tensor

    def barrier(self) -> None:
        dist.barrier()

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object_list(self, objects: list[Any], src: int = 0) -> list[Any]:
        dist.broadcast_object_list(objects, src=src)
        return objects

    def start_flag_max(self, value: int) -> Any:
        """The maximum of ``value`` over every process, started now and waited for by the
        function returned: an asynchronous all-reduce on a gloo group of its own (made at the
        first call, by every process in the same order), so it moves no device memory, never
        queues behind the run's collectives and costs the step nothing while it travels."""
        if self._flag_group is None:
            self._flag_group = dist.new_group(backend="gloo")
            self._flag_options = dist.AllreduceOptions()
            self._flag_options.reduceOp = dist.ReduceOp.MAX
        flag = torch.tensor([value], dtype=torch.int32)
        # the group's own call: dist.all_reduce's checks of group and tensor cost more than the
        # reduce of 4 bytes, and nothing here can fail them
        work = self._flag_group.allreduce([flag], self._flag_options)

        def result() -> int:
            work.wait()
            return int(flag[0])

        return result

    def destroy(self, group: Any = None) -> None:
        if group_is_ready():
            dist.destroy_process_group(group)
