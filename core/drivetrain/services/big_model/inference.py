"""Pipeline-parallel inference over ``torch.distributed.pipelining``.

:func:`prepare_pippy` cuts a model into one stage per process at ``split_points`` (module
names; found by balancing sizes with ``"auto"``), traces it with example inputs, and
replaces its ``forward``: the first process feeds microbatches in, every process runs its
stage, and the last process holds the output (every process with ``gather_output``).
The example is one microbatch, as in Accelerate: a call's batch is cut into ``num_chunks``
microbatches, and a call whose microbatches have another batch size than the example's is
traced again for that size (once per size). Every process must call the model with inputs
of the same shape; only the first process's inputs are used.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import torch
from torch import nn

from ...kernel.errors import ConfigError
from ...runtime.state import PartialState
from .device_map import infer_auto_device_map
from .modeling import compute_module_sizes
from ..cross_process import broadcast_object_list
from ...tensors.nested import find_batch_size, slice_tensors

logger = logging.getLogger("drivetrain.inference")  # its name before the layers, kept for log filters

__all__ = ["generate_device_map", "find_pippy_batch_size", "build_pipeline", "pippy_forward", "prepare_pippy"]


def generate_device_map(model: nn.Module, num_processes: int = 1, no_split_module_classes: list[str] | None = None,
                        max_memory: dict[int | str, int] | None = None) -> dict[str, int | str]:
    """A device map spreading ``model`` evenly over ``num_processes`` stages (keys 0..N-1)."""
    if num_processes < 1:
        raise ConfigError("num_processes must be at least 1")
    if max_memory is None:
        size = compute_module_sizes(model)[""]
        # Each stage gets its share plus a margin, so the last one is not left with a crumb.
        share = (size + size // num_processes) // num_processes
        max_memory = {index: share for index in range(num_processes)}
    return infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=no_split_module_classes,
                                 clean_result=False)


def _split_points_from(device_map: dict[str, Any], num_processes: int) -> list[str]:
    points = []
    for stage in range(1, num_processes):
        first = next((name for name, device in device_map.items() if device == stage), None)
        if first is None:
            raise ConfigError(f"the model is too small to cut into {num_processes} stages; give split_points yourself")
        points.append(first)
    return points


def find_pippy_batch_size(args: Any, kwargs: dict[str, Any] | None) -> int | None:
    """The batch size of the first tensor among ``args`` then ``kwargs``, or ``None``."""
    for value in list(args or ()) + list((kwargs or {}).values()):
        try:
            return find_batch_size(value)
        except (TypeError, ValueError):
            continue
    return None


def build_pipeline(model: nn.Module, split_points: list[str], args: tuple[Any, ...] = (),
                   kwargs: dict[str, Any] | None = None, num_chunks: int | None = None) -> Any:
    """Trace ``model`` with ``args``/``kwargs`` as one microbatch, cut it at ``split_points`` and
    return this process's schedule (``torch.distributed.pipelining.ScheduleGPipe``) of
    ``num_chunks`` microbatches per step."""
    from torch.distributed.pipelining import ScheduleGPipe, SplitPoint, pipeline

    state = PartialState()
    num_chunks = num_chunks or state.num_processes
    try:
        pipe = pipeline(model, mb_args=tuple(args), mb_kwargs=kwargs or None,
                        split_spec={point: SplitPoint.BEGINNING for point in split_points})
    finally:
        # torch marks the split points by wrapping those submodules' forward in place; undo it
        # so that the model can be traced again (for another microbatch size) or run whole.
        _unwrap_split_points(model, split_points)
    stage = pipe.build_stage(state.process_index, device=state.device)
    return ScheduleGPipe(stage, num_chunks)


def _unwrap_split_points(model: nn.Module, split_points: list[str]) -> None:
    for point in split_points:
        try:
            module = model.get_submodule(point)
        except AttributeError:
            continue
        original = module.__dict__.pop("_orig_forward", None)
        if original is not None:
            module.forward = original
            if getattr(original, "__self__", None) is module and original.__func__ is type(module).forward:
                del module.forward  # back to the class's forward, as before tracing


def _microbatch(args: tuple[Any, ...], kwargs: dict[str, Any], size: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    part = slice(0, size)
    return tuple(slice_tensors(a, part) for a in args), {k: slice_tensors(v, part) for k, v in kwargs.items()}


def pippy_forward(forward: Callable[..., Any], num_chunks: int, gather_output: bool, *args: Any, **kwargs: Any) -> Any:
    """Run one pipelined step: inputs enter on the first process, the output leaves on the last
    (broadcast to every process with ``gather_output``)."""
    state = PartialState()
    if state.num_processes == 1:
        return forward(*args, **kwargs)
    if state.process_index == 0:
        output = forward(*args, **kwargs)
    else:
        output = forward()
    if state.process_index != state.num_processes - 1:
        output = None
    if gather_output:
        output = broadcast_object_list([output], from_process=state.num_processes - 1)[0]
    return output


def prepare_pippy(model: nn.Module, split_points: str | list[str] = "auto",
                  no_split_module_classes: list[str] | None = None, example_args: tuple[Any, ...] = (),
                  example_kwargs: dict[str, Any] | None = None, num_chunks: int | None = None,
                  gather_output: bool = False) -> nn.Module:
    """Make ``model`` run as a pipeline across the processes of this job.

    Args:
        split_points: module names where each stage after the first begins, or ``"auto"``
            (balanced by size, never inside ``no_split_module_classes``).
        example_args, example_kwargs: one microbatch of inputs (the model is called with
            ``num_chunks`` times its batch; another batch size is traced again on first use).
        num_chunks: microbatches per call (default: the number of processes).
        gather_output: every process gets the output, not only the last one.
    """
    state = PartialState()
    example_args = tuple(example_args or ())
    num_chunks = num_chunks or state.num_processes
    if split_points == "auto":
        device_map = generate_device_map(model, state.num_processes, no_split_module_classes)
        split_points = _split_points_from(device_map, state.num_processes)
    split_points = list(split_points)
    if len(split_points) != state.num_processes - 1:
        raise ConfigError(f"{len(split_points)} split points make {len(split_points) + 1} stages but the job has "
                          f"{state.num_processes} processes; give one split point fewer than processes")
    schedule = build_pipeline(model, split_points, example_args, example_kwargs, num_chunks)
    schedules = {find_pippy_batch_size(example_args, example_kwargs): schedule}
    model._original_forward = model.forward
    model._original_call = model.__call__
    model.pippy_stage = schedule
    model.hf_split_points = split_points

    def schedule_for(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        batch = find_pippy_batch_size(args, kwargs)
        if batch is None:
            return model.pippy_stage
        if batch % num_chunks:
            raise ConfigError(f"the batch ({batch}) does not divide into num_chunks={num_chunks} microbatches; "
                              "make it a multiple, or give prepare_pippy another num_chunks")
        size = batch // num_chunks
        if size in schedules:
            return schedules[size]
        logger.info("prepare_pippy: tracing the model again for microbatches of %d (the example had %s)",
                    size, next(iter(schedules)))
        mb_args, mb_kwargs = _microbatch(args, kwargs, size)
        wrapper = model.__dict__.pop("forward")
        try:  # trace the model's own forward, not this wrapper
            schedules[size] = build_pipeline(model, split_points, mb_args, mb_kwargs, num_chunks)
        finally:
            model.forward = wrapper
        return schedules[size]

    def forward(*args: Any, **kwargs: Any) -> Any:
        current = schedule_for(args, kwargs)
        model.pippy_stage = current
        return pippy_forward(current.step, num_chunks, gather_output, *args, **kwargs)

    forward.__wrapped__ = model._original_forward
    model.forward = forward
    return model
