"""``save_state`` / ``load_state`` of DeepSpeed engines, inside drivetrain's crash-safe layout.

A trained engine writes its own checkpoint (``engine.save_checkpoint``: module states,
each process's ZeRO partition of the optimizer, the scheduler, DeepSpeed's
``zero_to_fp32.py``) into ``deepspeed_model_<i>/`` of the temporary checkpoint directory; the
core writes the rest (data loaders, RNG states, ...) and publishes the directory atomically.
The optimizer's state is part of the engine checkpoint, so the optimizer hooks only say so.

An engine without optimizer (a frozen teacher) has nothing but weights: the core writes its
full weights (gathered under ZeRO-3) as for any model, and they are loaded back here.

DeepSpeed's checkpoint files are pickles (``torch.save``), unlike the rest of a drivetrain
checkpoint: load only checkpoints you trust.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from drivetrain.errors import CheckpointError

from .engine import is_engine, is_zero3, load_full_state_dict, trains

TAG = "state"


def engine_directory(index: int) -> str:
    return f"deepspeed_model_{index}"


def save_engine(engine: Any, index: int, directory: str, run: Any) -> list[str] | None:
    """Write a trained engine's checkpoint; returns the files (listed by the main process)."""
    if not is_engine(engine) or not trains(engine):
        return None
    name = engine_directory(index)
    target = Path(directory) / name
    engine.save_checkpoint(str(target), tag=TAG, client_state={}, save_latest=True)  # tools read "latest"
    run.state.wait_for_everyone()  # every process's partition is on disk before the main one lists them
    if not run.state.is_main_process:
        return []
    files = []
    for root, _dirs, names in os.walk(target):
        for file_name in names:
            files.append(os.path.relpath(os.path.join(root, file_name), directory))
    return sorted(files)


def _writer(manifest: Mapping[str, Any]) -> str:
    plugins = manifest.get("plugins") or {}
    return ", ".join(sorted(plugins)) or "an unknown run"


def load_engine(engine: Any, index: int, directory: str, run: Any, manifest: Mapping[str, Any]) -> bool | None:
    """Restore an engine from ``save_engine``'s files (or a frozen ZeRO-3 engine's weights)."""
    if not is_engine(engine):
        return None
    if not trains(engine):
        return _load_frozen(engine, index, directory)
    target = Path(directory) / engine_directory(index)
    if not (target / TAG).is_dir():
        raise CheckpointError(
            f"{directory} holds no DeepSpeed engine checkpoint for model {index} ({engine_directory(index)}/{TAG}/); "
            f"it was written by {_writer(manifest)} with distributed type {manifest.get('distributed_type')!r}. "
            "Load it with the strategy that wrote it, or load its model weights with load_checkpoint_in_model")
    saved_world = manifest.get("world_size")
    if saved_world != run.state.num_processes and engine.zero_optimization_stage() > 0:
        raise CheckpointError(
            f"{directory} was saved by {saved_world} processes and its DeepSpeed ZeRO optimizer state is split "
            f"{saved_world} ways; resume it with {saved_world} processes (or convert it with DeepSpeed's universal "
            "checkpoint tools and load it through DeepSpeed)")
    path, _client_state = engine.load_checkpoint(str(target), tag=TAG, load_module_strict=True,
                                                 load_optimizer_states=True, load_lr_scheduler_states=True)
    if path is None:
        raise CheckpointError(f"DeepSpeed could not load its checkpoint from {target}")
    return True


def _load_frozen(engine: Any, index: int, directory: str) -> bool | None:
    if not is_zero3(engine):
        return None  # the core loads whole weights into engine.module
    from drivetrain.checkpointing.model_files import read_model_files

    path = Path(directory) / f"model_{index}"
    if not path.exists():
        raise CheckpointError(f"{path} is missing: the checkpoint holds fewer models than were prepared")
    load_full_state_dict(engine, read_model_files(path))
    return True
