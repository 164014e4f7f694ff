"""What ``Accelerator.prepare`` does with each object: models, optimizers, schedulers, data loaders.

Each function takes the accelerator whose run's plugins do the work (passed in, never
imported) and records what it prepared in the accelerator's
:class:`~drivetrain.runtime.prepared.PreparedObjects` (``accelerator._prepared``), which
checkpointing and the step read.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from ..kernel.errors import ConfigError, DrivetrainError
from ..runtime.optimizer import AcceleratedOptimizer
from ..runtime.scheduler import AcceleratedScheduler


def is_dataloader(obj: Any) -> bool:
    return isinstance(obj, torch.utils.data.DataLoader)


def is_scheduler(obj: Any) -> bool:
    return isinstance(obj, torch.optim.lr_scheduler.LRScheduler) or (
        hasattr(obj, "step") and hasattr(obj, "optimizer") and hasattr(obj, "get_last_lr")
    )


def prepare(accelerator: Any, objects: Sequence[Any], device_placement: Sequence[bool] | None) -> Any:
    """Prepare the objects in any order; they come back in the order given (one object alone)."""
    run = accelerator.run
    if device_placement is None:
        device_placement = [None] * len(objects)
    elif len(device_placement) != len(objects):
        raise ConfigError(f"device_placement has {len(device_placement)} entries for {len(objects)} objects")
    placement = [accelerator.device_placement if p is None else p for p in device_placement]
    # Data loaders first: a strategy preparing the rest together may need their batch size.
    items = [_prepare_if_dataloader(accelerator, obj, placement[index]) for index, obj in enumerate(objects)]
    transformed = run.call("drivetrain_transform_objects", objects=items, accelerator=accelerator)
    transformed = items if transformed is None else transformed
    if len(transformed) != len(items):
        raise DrivetrainError(f"a plugin transformed the {len(items)} objects of prepare into {len(transformed)}")
    items = list(transformed)
    converted: list[int] = []
    prepared = None
    if run.hook("drivetrain_prepare_objects").get_hookimpls():
        # A strategy may wrap this call's models together with their optimizers (an engine):
        # it places and wraps them, but every model still goes through the conversions
        # before and the finalisation (compilation) after, as with any other strategy.
        converted = [index for index, obj in enumerate(items) if _is_new_model(accelerator, obj)]
        for index in converted:
            items[index] = run.precision.convert_model(items[index])
        prepared = run.call("drivetrain_prepare_objects", objects=items, device_placement=placement,
                            accelerator=accelerator)
    if prepared is None:
        prepared = _prepare_one_by_one(accelerator, items, placement, converted)
    else:
        prepared = list(prepared)
        if len(prepared) != len(items):
            raise DrivetrainError(f"the strategy prepared {len(prepared)} objects for the {len(items)} given")
        for index in converted:
            if isinstance(prepared[index], torch.nn.Module):
                prepared[index] = _finalize(run, prepared[index])
        _record_prepared(accelerator, prepared)
    return prepared[0] if len(prepared) == 1 else tuple(prepared)


def refuse_offloaded_quantized_model(model: torch.nn.Module, distributed_type: str) -> None:
    """A model loaded with 8-bit or 4-bit weights (``is_loaded_in_8bit``/``is_loaded_in_4bit``,
    as transformers marks it) trains only where its whole device map is one device."""
    if not (getattr(model, "is_loaded_in_8bit", False) or getattr(model, "is_loaded_in_4bit", False)):
        return
    device_map = getattr(model, "hf_device_map", None) or {}
    devices = {str(device) for device in device_map.values()}
    if devices & {"cpu", "disk"}:
        raise ConfigError("a model loaded in 8-bit or 4-bit precision cannot be trained with CPU or disk offload "
                          f"(its device map puts parts on {sorted(devices & {'cpu', 'disk'})}); load it with a "
                          "device map onto the training device only, e.g. device_map={'': accelerator.device}")
    if len(devices) > 1 and distributed_type != "NO":
        raise ConfigError("a model loaded in 8-bit or 4-bit precision across several devices "
                          f"({sorted(devices)}) cannot be trained on several processes; load it onto each "
                          "process's device, e.g. device_map={'': accelerator.device}")


def mark_prepared(obj: Any) -> Any:
    """Flag ``obj`` as prepared (``_is_accelerate_prepared``, which libraries built on
    Accelerate read to skip preparing it again); an object that takes no attributes stays unflagged."""
    try:
        obj._is_accelerate_prepared = True
    except (AttributeError, TypeError):
        pass
    return obj


def watched(accelerator: Any, obj: Any) -> Any:
    """``obj``, watched by the accelerator's step monitor when ``MonitorKwargs`` asked for one."""
    monitor = accelerator._monitor
    return obj if monitor is None else monitor.watch(obj)


def _is_new_model(accelerator: Any, obj: Any) -> bool:
    return isinstance(obj, torch.nn.Module) and all(obj is not known for known in accelerator._prepared.models)


def _record_prepared(accelerator: Any, prepared: list[Any]) -> None:
    """Keep what a strategy's ``drivetrain_prepare_objects`` returned, by kind."""
    for obj in prepared:
        if isinstance(obj, torch.nn.Module):
            known = accelerator._prepared.models
        elif isinstance(obj, torch.optim.Optimizer):
            known = accelerator._prepared.optimizers
        elif is_scheduler(obj) and not is_dataloader(obj):
            known = accelerator._prepared.schedulers
        else:
            continue
        if all(obj is not item for item in known):
            known.append(watched(accelerator, mark_prepared(obj)))


def _prepare_one_by_one(accelerator: Any, objects: list[Any], placement: list[bool],
                        converted: list[int]) -> list[Any]:
    result: list[Any] = list(objects)
    # Models first, then optimizers (they refer to model parameters), then schedulers.
    for index, obj in enumerate(result):
        if _is_new_model(accelerator, obj):
            result[index] = prepare_model(accelerator, obj, placement[index], converted=index in converted)
    for stage in (_prepare_if_dataloader, _prepare_if_optimizer, _prepare_if_scheduler):
        for index, obj in enumerate(result):
            result[index] = stage(accelerator, obj, placement[index])
    return result


def _prepare_if_dataloader(accelerator: Any, obj: Any, placement: bool) -> Any:
    if is_dataloader(obj) and obj not in accelerator._prepared.dataloaders:
        return accelerator.prepare_data_loader(obj, device_placement=placement)
    return obj


def _prepare_if_optimizer(accelerator: Any, obj: Any, placement: bool) -> Any:
    if isinstance(obj, torch.optim.Optimizer) and not isinstance(obj, AcceleratedOptimizer):
        return accelerator.prepare_optimizer(obj, device_placement=placement)
    return obj


def _prepare_if_scheduler(accelerator: Any, obj: Any, placement: bool) -> Any:
    if is_scheduler(obj) and not isinstance(obj, AcceleratedScheduler):
        return accelerator.prepare_scheduler(obj)
    return obj


def prepare_model(accelerator: Any, model: torch.nn.Module, device_placement: bool | None = None,
                  evaluation_mode: bool = False, converted: bool = False) -> torch.nn.Module:
    """Place, convert, wrap and finalise a model through the run's plugins; a model this
    accelerator already prepared comes back as it is (wrapped once, recorded once)."""
    if any(model is known for known in accelerator._prepared.models):
        return model
    refuse_offloaded_quantized_model(model, accelerator.distributed_type)
    run = accelerator.run
    if device_placement is None:
        device_placement = accelerator.device_placement
    strategy = run.selection.strategy
    if device_placement and not (strategy is not None and strategy.places_models):
        model = model.to(accelerator.device)
    if not converted:
        model = run.precision.convert_model(model)
    wrapped = run.call("drivetrain_wrap_model", model=model, evaluation_mode=evaluation_mode)
    model = _finalize(run, model if wrapped is None else wrapped)
    accelerator._prepared.models.append(watched(accelerator, mark_prepared(model)))
    return model


def _finalize(run: Any, model: torch.nn.Module) -> torch.nn.Module:
    """The precision's last change to a wrapped model, then a feature's (compilation)."""
    model = run.precision.finalize_model(model)
    finalized = run.call("drivetrain_finalize_model", model=model)
    return model if finalized is None else finalized


def prepare_optimizer(accelerator: Any, optimizer: torch.optim.Optimizer, device_placement: bool | None) -> Any:
    if device_placement is None:
        device_placement = accelerator.device_placement
    wrapped = accelerator.run.call("drivetrain_wrap_optimizer", optimizer=optimizer)
    if wrapped is None:
        wrapped = AcceleratedOptimizer(optimizer, device_placement=device_placement, scaler=accelerator.scaler,
                                       device=accelerator.device)
    accelerator._prepared.optimizers.append(watched(accelerator, mark_prepared(wrapped)))
    return wrapped


def prepare_scheduler(accelerator: Any, scheduler: Any) -> Any:
    optimizers = [opt for opt in accelerator._prepared.optimizers if getattr(opt, "optimizer", opt) is scheduler.optimizer] \
        or accelerator._prepared.optimizers
    wrapped = accelerator.run.call("drivetrain_wrap_scheduler", scheduler=scheduler, optimizers=optimizers)
    if wrapped is None:
        wrapped = AcceleratedScheduler(scheduler, optimizers, step_with_optimizer=accelerator.step_scheduler_with_optimizer,
                                       split_batches=accelerator.split_batches)
    accelerator._prepared.schedulers.append(mark_prepared(wrapped))
    return wrapped


def prepare_data_loader(accelerator: Any, data_loader: Any, device_placement: bool | None,
                        slice_fn_for_dispatch: Callable | None) -> Any:
    from ..services.data_loader import prepare_data_loader as shard_data_loader

    run = accelerator.run
    if device_placement is None:
        device_placement = accelerator.device_placement
    config = accelerator.dataloader_config
    dispatch_batches = config.dispatch_batches
    if run.data_parallel_size != accelerator.num_processes:
        # Peers that share a batch (tensor/context parallel) read the same shard; the main
        # process's dispatching cuts batches by process index instead.
        if dispatch_batches:
            raise ConfigError("dispatch_batches cannot be used when processes share batches (tensor or context "
                              "parallelism); set DataLoaderConfiguration(dispatch_batches=False)")
        dispatch_batches = False
    prepared = shard_data_loader(
        data_loader, accelerator.device, num_processes=run.data_parallel_size,
        process_index=run.data_parallel_rank, split_batches=config.split_batches,
        put_on_device=device_placement, rng_types=list(accelerator.rng_types),
        dispatch_batches=dispatch_batches, even_batches=config.even_batches,
        slice_fn_for_dispatch=slice_fn_for_dispatch, use_seedable_sampler=config.use_seedable_sampler,
        data_seed=config.data_seed, non_blocking=config.non_blocking,
        use_stateful_dataloader=config.use_stateful_dataloader,
    )
    prepared = run.platform.wrap_dataloader(prepared, accelerator.device)
    accelerator._prepared.dataloaders.append(watched(accelerator, mark_prepared(prepared)))
    return prepared
