"""Accelerate's FSDP2 preparation and checkpoint helpers at ``drivetrain.utils``, thin over
the plugin's own sharding (``wrap.py``) and checkpoints (``checkpoint.py``).

The model helpers write and read Accelerate's folder name, ``pytorch_model_fsdp_<index>/``
(DCP shards, or the full state's model files), so that ``merge_fsdp_weights`` and
``accelerate merge-weights`` take the path Accelerate's documentation gives; the optimizer
helpers write ``optimizer_<index>/`` as ``save_state`` does.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from drivetrain.plugin_api import ConfigError, DrivetrainError

from .options import FullyShardedDataParallelPlugin
from .strategy import FSDPStrategy


def _sharding_strategy(run: Any) -> FSDPStrategy:
    """The run's strategy, which must shard with FSDP (fsdp, or one that composes it such as
    ``parallelism_config``): these helpers are Accelerate's, called by the user on any run.
    Configured here when no ``Accelerator`` did it."""
    strategy = run.strategy
    if not isinstance(strategy, FSDPStrategy):
        chosen = run.selection.strategy.name if run.selection.strategy is not None else None
        raise DrivetrainError(f"this run's strategy is {chosen!r}, not fsdp; FSDP's helpers work on a run that shards "
                              "with FSDP: pass fsdp_plugin=FullyShardedDataParallelPlugin(...) to the Accelerator "
                              "or launch with --use-fsdp")
    if strategy.options is None:
        strategy.configure_unprepared(run)
    return strategy


@contextlib.contextmanager
def _options(accelerator: Any, fsdp_plugin: FullyShardedDataParallelPlugin | None) -> Iterator[Any]:
    """The accelerator's run, with ``fsdp_plugin``'s options in force for the block."""
    run = accelerator.run
    fsdp = _sharding_strategy(run)
    previous = fsdp.options
    if fsdp_plugin is not None:
        if not isinstance(fsdp_plugin, FullyShardedDataParallelPlugin):
            raise ConfigError(f"fsdp_plugin must be a FullyShardedDataParallelPlugin, not {type(fsdp_plugin).__name__}")
        fsdp.options = fsdp_plugin
    try:
        yield run
    finally:
        fsdp.options = previous


def _refuse(adapter_only: bool, use_dcp: bool) -> None:
    if adapter_only:
        raise ConfigError("adapter_only=True is not supported: drivetrain saves and loads the whole model's state "
                          "(a PEFT model's adapters included); pass adapter_only=False")
    if not use_dcp:
        raise ConfigError("use_dcp=False (one torch.save file per rank) is not supported: sharded states are written "
                          "with torch.distributed.checkpoint; pass use_dcp=True")


def _model_folder(model_index: int) -> str:
    from .compat import FSDP_MODEL_NAME

    return f"{FSDP_MODEL_NAME}_{model_index}"


def save_fsdp_model(fsdp_plugin: Any, accelerator: Any, model: Any, output_dir: str, model_index: int = 0,
                    adapter_only: bool = False, use_dcp: bool = True) -> list[str]:
    """Write ``model``'s state under ``output_dir/pytorch_model_fsdp_<model_index>`` as ``fsdp_plugin``'s
    ``state_dict_type`` says (DCP shards, or the full state on the main process); returns the
    files written, relative to ``output_dir``."""
    from .checkpoint import save_model

    _refuse(adapter_only, use_dcp)
    with _options(accelerator, fsdp_plugin) as run:
        written = save_model(model, model_index, str(output_dir), run, safe_serialization=True,
                             folder=_model_folder(model_index))
    if written is None:
        raise ConfigError("save_fsdp_model needs a model prepared with FSDP (accelerator.prepare under fsdp_plugin)")
    return written


def load_fsdp_model(fsdp_plugin: Any, accelerator: Any, model: Any, input_dir: str, model_index: int = 0,
                    adapter_only: bool = False, use_dcp: bool = True) -> None:
    """Read what :func:`save_fsdp_model` wrote into the sharded ``model`` (each tensor checked
    against the model before anything is copied)."""
    from .checkpoint import load_model

    _refuse(adapter_only, use_dcp)
    with _options(accelerator, fsdp_plugin) as run:
        if load_model(model, model_index, str(input_dir), run, folder=_model_folder(model_index)) is None:
            raise ConfigError("load_fsdp_model needs a model prepared with FSDP (accelerator.prepare under "
                              "fsdp_plugin)")


def save_fsdp_optimizer(fsdp_plugin: Any, accelerator: Any, optimizer: Any, model: Any, output_dir: str,
                        optimizer_index: int = 0, use_dcp: bool = True) -> list[str]:
    """Write the state of ``optimizer`` (of the sharded ``model``) under
    ``output_dir/optimizer_<optimizer_index>``; returns the files written."""
    from .checkpoint import save_optimizer

    _refuse(False, use_dcp)
    with _options(accelerator, fsdp_plugin) as run:
        return save_optimizer(optimizer, optimizer_index, str(output_dir), run) or []


def load_fsdp_optimizer(fsdp_plugin: Any, accelerator: Any, optimizer: Any, model: Any, input_dir: str,
                        optimizer_index: int = 0, adapter_only: bool = False, use_dcp: bool = True) -> None:
    """Read what :func:`save_fsdp_optimizer` wrote into ``optimizer``."""
    from .checkpoint import load_optimizer

    _refuse(adapter_only, use_dcp)
    with _options(accelerator, fsdp_plugin) as run:
        load_optimizer(optimizer, optimizer_index, str(input_dir), run)


def fsdp2_prepare_model(accelerator: Any, model: torch.nn.Module) -> torch.nn.Module:
    """Shard ``model`` in place with FSDP2 and the accelerator's FSDP options (units, mixed
    precision, offload, activation checkpointing, weights from the main process); returns it.
    A model already sharded is returned as it is."""
    from .wrap import wrap_model

    options = _sharding_strategy(accelerator.run).options
    if options.fsdp_version != 2:
        raise ConfigError("fsdp2_prepare_model needs fsdp_version=2 in the accelerator's FullyShardedDataParallelPlugin")
    return wrap_model(model, accelerator.run)


def fsdp2_load_full_state_dict(accelerator: Any, model: torch.nn.Module, full_sd: dict[str, Any],
                               cpu_offload: bool = False) -> None:
    """Load a full (unsharded) state dict into the FSDP2 ``model``: the main process's
    ``full_sd`` is broadcast and each process keeps its shards (the others may pass ``{}``)."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    from .wrap import quiet

    from_main = dist.get_world_size() > 1
    with quiet():
        # a copy: torch replaces the dict's tensors by the shards it distributes
        set_model_state_dict(model, dict(full_sd), options=StateDictOptions(
            full_state_dict=True, broadcast_from_rank0=from_main, cpu_offload=cpu_offload))


def fsdp2_switch_optimizer_parameters(optimizer: torch.optim.Optimizer, mapping: dict[int, Any]) -> None:
    """Point ``optimizer``'s parameter groups at the sharded parameters: ``mapping`` takes each
    original parameter's ``data_ptr()`` to its replacement."""
    for group in optimizer.param_groups:
        try:
            group["params"] = [mapping[parameter.data_ptr()] for parameter in group["params"]]
        except KeyError:
            raise ConfigError("a parameter of the optimizer has no sharded counterpart in the mapping; build the "
                              "mapping from the model the optimizer was created for, before sharding it") from None


def fsdp2_apply_ac(accelerator: Any, model: torch.nn.Module) -> torch.nn.Module:
    """Wrap the units the accelerator's FSDP options choose (``auto_wrap_policy``) in
    activation checkpointing (non-reentrant), before sharding; returns ``model``."""
    from .wrap import _apply_checkpointing, units_of

    options = _sharding_strategy(accelerator.run).options
    if options.auto_wrap_policy == "NO_WRAP":
        raise ConfigError("activation checkpointing recomputes each unit's activations, but auto_wrap_policy "
                          "NO_WRAP makes no units; use TRANSFORMER_BASED_WRAP or SIZE_BASED_WRAP")
    chosen = {id(unit) for unit in units_of(model, options)}
    _apply_checkpointing(model, lambda module: id(module) in chosen)
    return model
