"""Checkpoints in Accelerate's layout: read by ``load_state``, written by ``drivetrain checkpoint export``.

Accelerate's ``save_state`` writes flat files, numbered from the second object of a kind on
(``model.safetensors`` or ``pytorch_model.bin``, then ``model_1.safetensors``...;
``optimizer.bin``, ``scheduler.bin``, ``custom_checkpoint_<i>.pkl``, ``dl_state_dict.bin``
for a torchdata loader, ``scaler.pt``, one ``random_states_<rank>.pkl`` per process holding the
step and the python, numpy, torch and device generator states), all but the safetensors ones
``torch.save`` pickles, and no manifest. A run that moves over resumes such a directory as it is:

- every pickle goes through :func:`~.safe_load.safe_torch_load` (tensors and plain data, plus
  the numpy classes a numpy generator state is made of); a custom object whose state holds
  anything else is refused, naming the file;
- there are no checksums to verify: the load says so once;
- ``sampler.bin`` (Accelerate's pickled sampler object) is not read: a class instance cannot be
  read without running its code.

The export goes the other way, from a drivetrain checkpoint (verified against its manifest) to
files Accelerate's ``load_state`` reads.
"""

from __future__ import annotations

import importlib
import io
import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...kernel.errors import CheckpointError
from . import checksums, layout
from .model_files import read_model_files_later
from .output_dir import refuse_unusable_output, written_whole
from .safe_load import safe_torch_load
from .safetensors_io import read_safetensors, write_safetensors
from .tree_io import load_tree

logger = logging.getLogger("drivetrain.checkpointing.accelerate_layout")

# what a numpy generator state (np.random.get_state()) pickles as; the module of _reconstruct moved in numpy 2
_NUMPY_STATE_TYPES = (("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.dtypes", "UInt32DType"))
_RECONSTRUCT = ("numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct")
_MARKERS = ("model.safetensors", "pytorch_model.bin", "optimizer.bin", "scheduler.bin", "random_states_0.pkl")
_warned_no_checksums = False
COMMAND = "checkpoint export"


def numbered(stem: str, index: int, suffix: str) -> str:
    """Accelerate's name of the ``index``-th file of a kind: ``optimizer.bin``, ``optimizer_1.bin``..."""
    return f"{stem}{'' if index == 0 else f'_{index}'}{suffix}"


def is_accelerate_layout(directory: Path) -> bool:
    """A directory Accelerate's ``save_state`` wrote (no manifest; its flat files)."""
    return not (directory / layout.MANIFEST).exists() and any((directory / name).exists() for name in _MARKERS)


def safe_types() -> list[Any]:
    """The classes beside tensors and plain data an Accelerate checkpoint's pickles may name."""
    found: list[Any] = []
    for module, name in _NUMPY_STATE_TYPES:
        value = getattr(importlib.import_module(module), name, None)
        if value is not None:
            found.append(value)
    reconstruct = np.ndarray.__reduce__(np.zeros(1))[0]  # numpy's own array rebuilder, whichever module holds it
    found += [(reconstruct, name) for name in _RECONSTRUCT]
    return found


def _load(path: Path, location: Any = "cpu") -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return safe_torch_load(path, safe_types(), map_location=location)


def _say_unverified(directory: Path) -> None:
    global _warned_no_checksums
    if not _warned_no_checksums:
        _warned_no_checksums = True
        logger.warning("%s is in Accelerate's layout, which records no checksums: its files are read (safely: no "
                       "pickled code runs) but cannot be verified", directory)


def _rng(saved: Any, path: Path, platform_name: str, device_index: int) -> dict[str, Any]:
    if not isinstance(saved, dict) or "torch_manual_seed" not in saved:
        raise CheckpointError(f"{path} is not an Accelerate random states file (no torch_manual_seed)")
    device = saved.get(f"torch_{platform_name}_manual_seed")
    if isinstance(device, (list, tuple)):
        device = device[device_index] if device_index < len(device) else None
    numpy_state = saved.get("numpy_random_seed")
    return {"python": _as_python_state(saved.get("random_state")), "numpy": numpy_state,
            "torch": saved["torch_manual_seed"], "device": device}


def _as_python_state(state: Any) -> Any:
    # random.setstate wants tuples where the pickle may hand back lists
    if isinstance(state, (list, tuple)) and len(state) == 3:
        return (state[0], tuple(state[1]), state[2])
    return state


def read_checkpoint(directory: Path, counts: dict[str, int], rank: int, location: Any, platform_name: str,
                    device_index: int, strategy_loads_models: bool) -> dict[str, Any]:
    """What ``load_state`` restores, read from an Accelerate directory (the shape drivetrain's own
    reader returns: ``models``, ``trees``, ``rng``; no gradients)."""
    if strategy_loads_models:
        raise CheckpointError(f"{directory} is an Accelerate checkpoint of full weights; this run's strategy reads "
                              "its own sharded format: load it without the strategy (one process or DDP), save_state, "
                              "then resume that under the strategy")
    _say_unverified(directory)
    models: dict[int, dict[str, torch.Tensor]] = {}
    for index in range(counts["models"]):
        safe = directory / numbered("model", index, ".safetensors")
        pickled = directory / numbered("pytorch_model", index, ".bin")
        if safe.exists():
            models[index] = read_safetensors(safe, "cpu")
        elif pickled.exists():
            models[index] = _load(pickled)
        else:
            raise CheckpointError(f"{directory} holds no weights for model {index} ({safe.name} or {pickled.name}); "
                                  "prepare the same models as the run that saved it")
    trees: dict[str, Any] = {}
    sources: dict[str, str] = {}  # each tree's file, for the checks' messages
    for kind, stem, suffix, count in (("optimizer", "optimizer", ".bin", counts["optimizers"]),
                                      ("scheduler", "scheduler", ".bin", counts["schedulers"])):
        for index in range(count):
            path = directory / numbered(stem, index, suffix)
            if not path.exists():
                raise CheckpointError(f"{path} is missing: prepare the same {kind}s as the run that saved it")
            trees[f"{kind}_{index}"] = _load(path, location if kind == "optimizer" else "cpu")
            sources[f"{kind}_{index}"] = str(path)
    custom = sorted(directory.glob("custom_checkpoint_*.pkl"))
    if len(custom) != counts["custom_objects"]:
        raise CheckpointError(f"{directory} holds {len(custom)} custom_checkpoint files and {counts['custom_objects']} "
                              "objects are registered: register the same objects before load_state()")
    for index in range(counts["custom_objects"]):
        trees[f"custom_checkpoint_{index}"] = _load(directory / f"custom_checkpoint_{index}.pkl", location)
        sources[f"custom_checkpoint_{index}"] = str(directory / f"custom_checkpoint_{index}.pkl")
    for index in range(counts["dataloaders"]):
        path = directory / numbered("dl_state_dict", index, ".bin")
        if path.exists():  # a torchdata loader's position
            trees[f"dataloader_{index}"] = _load(path)
            sources[f"dataloader_{index}"] = str(path)
    if (directory / "sampler.bin").exists():
        logger.warning("%s/sampler.bin (Accelerate's pickled sampler) is not read: a pickled object cannot be read "
                       "without running its code; that loader starts its epoch from the beginning", directory)
    if (directory / "scaler.pt").exists():
        trees["scaler"] = _load(directory / "scaler.pt")
        sources["scaler"] = str(directory / "scaler.pt")
    rng = None
    rng_file = directory / f"random_states_{rank}.pkl"
    if rng_file.exists():
        saved = _load(rng_file)
        rng = _rng(saved, rng_file, platform_name, device_index)
        if "step" in saved:  # checked with the rest (state_values), before anything changes
            trees["accelerator"] = {"step": saved["step"]}
            sources["accelerator"] = f"{rng_file} (its 'step')"
    manifest = {"kind": "accelerate", "world_size": None, "plugins": {}}
    return {"manifest": manifest, "models": models, "trees": trees, "rng": rng, "grads": None,
            "rng_file": rng_file, "sources": sources}


# ----------------------------------------------------------------------- export


def export_checkpoint(source: Path, destination: Path) -> list[str]:
    """Write drivetrain checkpoint ``source`` into ``destination`` in Accelerate's layout.

    Every file of ``source`` is verified against its manifest first. Returns notes on what
    Accelerate's layout has no place for (drivetrain's data loader positions, gradients of an
    unfinished accumulation window).
    """
    refuse_unusable_output(destination, COMMAND, source=source, source_role="the checkpoint it exports")
    manifest = layout.read_manifest(source)
    if destination.exists() and any(destination.iterdir()):
        raise CheckpointError(f"{destination} exists and is not empty: export into a new directory")
    verifier = checksums.Verifier.for_manifest(source, manifest)
    counts = manifest.get("counts", {})
    notes: list[str] = []
    outputs: dict[str, Any] = {}
    for index in range(int(counts.get("models", 0))):
        folder = source / f"model_{index}"
        if not folder.is_dir() or not (any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))):
            raise CheckpointError(f"{folder} holds no full weights (a strategy's sharded format): merge them first "
                                  "(drivetrain merge-weights), or export a checkpoint saved without the strategy")
        state = read_model_files_later(folder, verifier=verifier)()
        outputs[numbered("model", index, ".safetensors")] = _unshared(state)
    trees = {path.stem: path for path in source.glob("*.json") if path.name != layout.MANIFEST}

    def tree(name: str) -> Any:
        return load_tree(source / name, verifier=verifier)

    for index in range(int(counts.get("optimizers", 0))):
        if f"optimizer_{index}" not in trees:
            raise CheckpointError(f"{source}/optimizer_{index}.json is missing (a strategy's own optimizer format?)")
        outputs[numbered("optimizer", index, ".bin")] = tree(f"optimizer_{index}")
    for name in sorted(trees):
        kind, _, number = name.rpartition("_")
        if kind == "scheduler":
            outputs[numbered("scheduler", int(number), ".bin")] = tree(name)
        elif kind == "custom_checkpoint":
            outputs[f"custom_checkpoint_{number}.pkl"] = tree(name)
        elif kind == "dataloader":
            state = tree(name)
            if isinstance(state, dict) and "batches_yielded" in state:
                if not state["batches_yielded"]:
                    continue  # at an epoch boundary: Accelerate's loader starts there as well
                notes.append(f"{name}: drivetrain's loader position (epoch {state['epoch']}, batch "
                             f"{state['batches_yielded']}) has no place in Accelerate's layout; skip that many "
                             "batches with skip_first_batches after load_state")
            else:  # a torchdata StatefulDataLoader's own state, which Accelerate restores too
                outputs[numbered("dl_state_dict", int(number), ".bin")] = state
    step = int(tree("accelerator").get("step", 0)) if "accelerator" in trees else 0
    if "scaler" in trees:
        outputs["scaler.pt"] = tree("scaler")
    for name in sorted(trees):
        if name.startswith("random_states_"):
            rng = tree(name)
            saved = {"step": step, "random_state": rng["python"], "numpy_random_seed": rng["numpy"],
                     "torch_manual_seed": rng["torch"]}
            platform = manifest.get("platform")
            if rng.get("device") is not None and platform:
                saved[f"torch_{platform}_manual_seed"] = [rng["device"]]
            outputs[f"{name}.pkl"] = saved
    if any(source.glob("gradients_*.safetensors")):
        notes.append("gradients of an unfinished accumulation window are not exported: Accelerate's layout has none")
    with written_whole(destination, COMMAND) as temporary:
        for name, value in outputs.items():
            if name.endswith(".safetensors"):
                write_safetensors(temporary / name, value, metadata={"format": "pt"})
            else:  # serialized in memory first: torch's own file writer reports a full disk as a RuntimeError
                buffer = io.BytesIO()
                torch.save(value, buffer)
                (temporary / name).write_bytes(buffer.getbuffer())
    return notes


def _unshared(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with no two tensors on one storage (a safetensors file holds each once)."""
    seen: set[tuple[int, int]] = set()
    result = {}
    for key, value in state.items():
        mark = (value.untyped_storage().data_ptr(), value.storage_offset()) if value.numel() else None
        result[key] = value.clone() if mark in seen else value.contiguous()
        if mark is not None:
            seen.add(mark)
    return result
