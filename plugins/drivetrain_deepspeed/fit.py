"""Checking that a DeepSpeed engine checkpoint fits the engine before DeepSpeed loads any of it.

``engine.load_checkpoint`` copies the module's tensors one by one and then the optimizer's
partitions, so a checkpoint of another model would fail half-way and leave the engine partly
changed. Before it runs, each process reads the model states file DeepSpeed would read
(through the safe loader) and compares every parameter and buffer with the engine: names (when
strict), shapes (``ds_shape`` of a ZeRO-3 partitioned parameter; its saved shape is in the
checkpoint's ``param_shapes``) and dtypes (a floating dtype may load into another, as
``load_state_dict`` allows). When the optimizer state is loaded too, the ZeRO parameter groups
the flat partitions were cut from must be the engine's own (same names, order and shapes).
The core runs this for every engine before any loads, and the processes compare outcomes, so
a mismatch on one fails all before anything is copied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

from drivetrain.plugin_api import CheckpointError, safe_torch_load


def _show(shape: Any, dtype: Any) -> str:
    return f"{tuple(shape)} {str(dtype).removeprefix('torch.')}"


def _current(engine: Any) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Full shape and dtype of everything in the module's state dict (partitioned or not)."""
    found = {}
    for name, value in engine.module.state_dict(keep_vars=True).items():
        if isinstance(value, torch.Tensor):
            shape = value.ds_shape if hasattr(value, "ds_id") else value.shape
            found[name] = (tuple(shape), value.dtype)
    return found


def _saved(checkpoint: Mapping[str, Any], partitioned: bool) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Shape and dtype of each saved module entry; under ZeRO-3 a parameter's shape comes from
    ``param_shapes`` / ``frozen_param_shapes`` (the module holds empty placeholders)."""
    module = checkpoint.get("module")
    if not isinstance(module, Mapping):
        raise CheckpointError("the DeepSpeed model states file holds no module state dict; "
                              "it was not written by engine.save_checkpoint")
    shapes: dict[str, Any] = {}
    if partitioned:
        for group in checkpoint.get("param_shapes") or []:
            shapes.update(group)
        shapes.update(checkpoint.get("frozen_param_shapes") or {})
        shared = checkpoint.get("shared_params") or {}
        for name, source in shared.items():
            if name not in shapes and source in shapes:
                shapes[name] = shapes[source]
    found = {}
    for name, value in module.items():
        if not isinstance(value, torch.Tensor):
            continue
        shape = shapes.get(name, value.shape) if partitioned else value.shape
        found[name] = (tuple(shape), value.dtype)
    return found


def _fits(saved: tuple[tuple[int, ...], torch.dtype], current: tuple[tuple[int, ...], torch.dtype]) -> bool:
    if saved[0] != current[0]:
        return False
    return saved[1] == current[1] or (saved[1].is_floating_point and current[1].is_floating_point)


def _check_module(checkpoint: Mapping[str, Any], engine: Any, where: str, strict: bool) -> None:
    partitioned = bool(engine.zero_optimization_partition_weights())
    saved, current = _saved(checkpoint, partitioned), _current(engine)
    if strict:
        missing = [name for name in current if name not in saved]
        unexpected = [name for name in saved if name not in current]
        if missing or unexpected:
            raise CheckpointError(f"{where} does not fit the model: missing {missing[:5]}, unexpected "
                                  f"{unexpected[:5]}; load it into the model that saved it, or pass strict=False")
    for name, value in saved.items():
        own = current.get(name)
        if own is not None and not _fits(value, own):
            raise CheckpointError(f"{where} does not fit: {name} is {_show(*value)} in the checkpoint but "
                                  f"{_show(*own)} here; load it into the same model and optimizer set-up that saved it")


def _check_optimizer(checkpoint: Mapping[str, Any], engine: Any, where: str) -> None:
    saved_groups = checkpoint.get("param_shapes")
    if engine.zero_optimization() and saved_groups is not None and hasattr(engine, "_get_zero_param_shapes"):
        # ZeRO's optimizer files hold flat partitions cut from these groups in this order
        own_groups = engine._get_zero_param_shapes()
        saved_list = [[(name, tuple(shape)) for name, shape in group.items()] for group in saved_groups]
        own_list = [[(name, tuple(shape)) for name, shape in group.items()] for group in own_groups]
        if saved_list != own_list:
            raise CheckpointError(
                f"{where}'s optimizer state does not fit: its ZeRO parameter groups hold "
                f"{[len(group) for group in saved_list]} parameters in the checkpoint but "
                f"{[len(group) for group in own_list]} here{_first_difference(saved_list, own_list)}; "
                "build the optimizer with the parameter groups that saved it, or pass load_optimizer_states=False")
        return
    saved = checkpoint.get("optimizer")
    if saved is not None and isinstance(engine.optimizer, torch.optim.Optimizer):  # ZeRO off, a torch optimizer
        from drivetrain.plugin_api import check_optimizer

        check_optimizer(saved, engine.optimizer, f"{where}'s optimizer state")


def _first_difference(saved: list, own: list) -> str:
    for index, (mine, theirs) in enumerate(zip(saved, own)):
        for position, (a, b) in enumerate(zip(mine, theirs)):
            if a != b:
                return f" (group {index}, entry {position}: {a[0]} {a[1]} saved, {b[0]} {b[1]} here)"
    return ""


def _model_states_file(engine: Any, target: Path, tag: str) -> Path:
    """The model states file DeepSpeed's load_checkpoint reads on this process."""
    if hasattr(engine, "_get_ckpt_name"):
        return Path(engine._get_ckpt_name(str(target), tag))
    pattern = "zero_pp_rank_*_mp_rank_*_model_states.pt" if engine.zero_optimization_partition_weights() \
        else "mp_rank_*_model_states.pt"
    found = sorted((target / tag).glob(pattern))
    return found[0] if found else target / tag / "mp_rank_00_model_states.pt"


def check_engine_fits(engine: Any, index: int, target: Path, tag: str, allowed: list[Any],
                      options: Mapping[str, Any]) -> tuple[Path, Mapping[str, Any]]:
    """Raise ``CheckpointError`` when the checkpoint does not fit the engine; ``options`` are the
    load_checkpoint arguments. Returns the model states file and what was read from it, for
    DeepSpeed's load to take instead of reading the file again. Calls no collective: the core
    gathers every process's outcome."""
    where = f"model_{index}"
    path = _model_states_file(engine, target, tag)
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the checkpoint was saved by another DeepSpeed set-up "
                              "(ZeRO stage, model parallel size); resume with the one that saved it")
    checkpoint = safe_torch_load(path, allowed, "cpu")
    if not isinstance(checkpoint, Mapping):
        raise CheckpointError(f"{path} is not a DeepSpeed model states file")
    _check_module(checkpoint, engine, where, bool(options.get("load_module_strict", True)))
    if options.get("load_optimizer_states", True) and not options.get("load_module_only", False):
        _check_optimizer(checkpoint, engine, where)
    return path, checkpoint
