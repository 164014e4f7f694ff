"""Loading a checkpoint into a model placed by a device map, one shard at a time.

Every file is checked first, from its header (safetensors) or its lazily mapped structure
(``torch.load(mmap=True, weights_only=True)``): names, shapes, bytes that fit the file. Only
then is anything changed, so a damaged or mismatched shard fails naming the file and leaves
the model as it was. Then each shard is read once, tensor by tensor, each placed and freed:
host memory stays near one shard plus what is kept on the CPU. Weights mapped to disk are
not read at all when they come from a safetensors file: the offload index points into it.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..checkpointing.model_files import ALIASES_KEY, read_index, tied_aliases
from ...kernel.errors import CheckpointError, CheckpointMismatchError, ConfigError
from .device_map import validate_device_map
from .modeling import (
    DISK,
    HOST,
    META,
    as_dtype,
    find_tied_parameters,
    retie_parameters,
    set_module_tensor_to_device,
)
from .offload import (
    load_offloaded_weights,
    offload_weight,
    read_tensor,
    safetensors_entries,
    safetensors_metadata,
    save_offload_index,
)
from ...kernel.contributed import surface_getattr

logger = logging.getLogger("drivetrain.utils.weights_loading")  # its name before the layers, kept for log filters

__all__ = ["load_state_dict", "load_checkpoint_in_model", "checkpoint_files"]

SAFE_WEIGHTS = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"
TORCH_WEIGHTS = "pytorch_model.bin"
TORCH_INDEX = "pytorch_model.bin.index.json"


def checkpoint_files(checkpoint: str | os.PathLike) -> tuple[list[Path], dict[str, str], dict[str, str]]:
    """The weight files of a checkpoint (a file, an index, or a folder), the aliases it
    declares (tied names stored once) and its weight map (name -> file name, when indexed)."""
    path = Path(checkpoint)
    if path.is_file():
        if path.name.endswith(".index.json"):
            return read_index(path)
        return [path], {}, {}
    if not path.is_dir():
        raise CheckpointError(f"{path} does not exist; give a weights file, an index file or a folder holding them")
    for name in (SAFE_INDEX, TORCH_INDEX):
        if (path / name).exists():
            return read_index(path / name)
    for name in (SAFE_WEIGHTS, TORCH_WEIGHTS):
        if (path / name).exists():
            return [path / name], {}, {}
    singles = sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".pt", ".pth"))
    indexes = sorted(path.glob("*.index.json"))
    if len(indexes) == 1:
        return read_index(indexes[0])
    if len(singles) == 1:
        return singles, {}, {}
    raise CheckpointError(f"cannot tell which weights to load in {path}: expected {SAFE_WEIGHTS}, {SAFE_INDEX}, "
                          f"{TORCH_WEIGHTS}, {TORCH_INDEX} or a single weights file")


def _torch_load(path: Path) -> dict[str, torch.Tensor]:
    from ..checkpointing.safe_load import safe_torch_load

    state = safe_torch_load(path, mmap=True)  # tensors stay in the file until read
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} does not hold a flat mapping of tensors; save the model's state_dict()")
    return state


class _Shard:
    """One weights file: its tensors' dtypes and shapes known up front, data read on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.safetensors = path.suffix == ".safetensors"
        if self.safetensors:
            self.entries = safetensors_entries(path)
            self.aliases = tied_aliases(safetensors_metadata(path).get(ALIASES_KEY, "{}"), path)
            self._lazy = None
        else:
            self._lazy = _torch_load(path)
            self.entries = {k: {"dtype": v.dtype, "shape": list(v.shape)} for k, v in self._lazy.items()}
            self.aliases = {}

    def names(self) -> list[str]:
        return list(self.entries)

    def read(self, name: str) -> torch.Tensor:
        if self._lazy is not None:
            return self._lazy[name].clone()  # its own memory, not pages of the mapped file
        entry = self.entries[name]
        return read_tensor(self.path, entry["offset"], entry["dtype"], entry["shape"])

    def close(self) -> None:
        self._lazy = None


def load_state_dict(checkpoint_file: str | os.PathLike, device_map: dict[str, Any] | None = None) -> dict[str, torch.Tensor]:
    """Every tensor of one weights file (safetensors, or a pickle read with ``weights_only``).

    With ``device_map``, each tensor is created on its device (``"disk"`` ones stay on the CPU).
    """
    shard = _Shard(Path(checkpoint_file))
    state = {}
    for name in shard.names():
        tensor = shard.read(name)
        if device_map is not None:
            device = _placement(name, device_map)
            if device not in (DISK, None):
                tensor = tensor.to(_as_torch_device(device))
        state[name] = tensor
    for alias, target in shard.aliases.items():
        state[alias] = state[target]
    return state


def _as_torch_device(device: Any) -> torch.device:
    from .modeling import resolve_device

    return resolve_device(device)


def _placement(name: str, device_map: dict[str, Any] | None) -> Any:
    if not device_map:
        return None
    probe = name
    while True:
        if probe in device_map:
            return device_map[probe]
        if not probe:
            return None
        probe = probe.rpartition(".")[0]


def _keep_fp32(name: str, keep_in_fp32_modules: list[str] | None) -> bool:
    if not keep_in_fp32_modules:
        return False
    parts = name.split(".")
    return any(module in parts or name.startswith(f"{module}.") for module in keep_in_fp32_modules)


def load_checkpoint_in_model(model: nn.Module, checkpoint: str | os.PathLike,
                             device_map: dict[str, Any] | None = None,
                             offload_folder: str | os.PathLike | None = None,
                             dtype: torch.dtype | str | None = None, offload_state_dict: bool = False,
                             offload_buffers: bool = False, keep_in_fp32_modules: list[str] | None = None,
                             offload_8bit_bnb: bool = False, strict: bool = False, full_state_dict: bool = True,
                             broadcast_from_rank0: bool = False) -> None:
    """Load ``checkpoint`` (a file, an index, or a folder, sharded or not) into ``model`` in place.

    Args:
        device_map: ``{"module.name": device}``: where each weight goes (``"disk"`` weights are
            recorded in ``offload_folder``'s ``index.json``; read from the checkpoint itself when
            it is safetensors in the right dtype). ``None``: where the model's tensors are (the
            CPU for tensors on the meta device).
        offload_folder: where weights mapped to disk are written when they must be copied.
        dtype: floating-point weights are cast to it (except in ``keep_in_fp32_modules``).
        offload_state_dict: CPU-mapped weights go through a temporary folder while shards are
            read, so at most one shard is in memory besides them.
        offload_buffers: buffers of disk-mapped modules go to disk too.
        strict: missing or unexpected names are an error.
    """
    index = load_checkpoint_to_offload_index(
        model, checkpoint, device_map=device_map, offload_folder=offload_folder, dtype=dtype,
        offload_state_dict=offload_state_dict, offload_buffers=offload_buffers,
        keep_in_fp32_modules=keep_in_fp32_modules, strict=strict)
    if index and offload_folder is not None:
        save_offload_index(index, offload_folder)


def load_checkpoint_to_offload_index(model: nn.Module, checkpoint: str | os.PathLike,
                                     device_map: dict[str, Any] | None = None,
                                     offload_folder: str | os.PathLike | None = None, dtype: Any = None,
                                     offload_state_dict: bool = False, offload_buffers: bool = False,
                                     keep_in_fp32_modules: list[str] | None = None,
                                     strict: bool = False) -> dict[str, dict[str, Any]]:
    """:func:`load_checkpoint_in_model`, returning the offload index of the disk-mapped weights."""
    dtype = as_dtype(dtype)
    if device_map is not None:
        validate_device_map(model, device_map)
    files, aliases, weight_map = checkpoint_files(checkpoint)
    tied = find_tied_parameters(model)
    model_tensors = dict(model.named_parameters(remove_duplicate=False))
    model_tensors.update(model.named_buffers())
    buffer_names = {name for name, _ in model.named_buffers()}

    # 1. Check everything before changing anything.
    shards = [_Shard(path) for path in files]
    found: dict[str, Path] = {}
    for shard in shards:
        for alias, target in shard.aliases.items():
            aliases.setdefault(alias, target)
        for name in shard.names():
            expected = weight_map.get(name)
            if expected is not None and Path(expected).name != shard.path.name:
                continue  # an index that lists the name in another shard wins
            target = model_tensors.get(name)
            if target is not None and list(target.shape) != list(shard.entries[name]["shape"]):
                raise CheckpointError(f"{shard.path}: {name} has shape {list(shard.entries[name]['shape'])} but the "
                                      f"model expects {list(target.shape)}; this checkpoint is for another model "
                                      "configuration")
            found[name] = shard.path
    for name, file_name in weight_map.items():
        if name not in found:
            raise CheckpointError(f"{files[0].parent / file_name} lacks {name}, which its index lists; the shard "
                                  "is damaged or from another save: copy the checkpoint again")
    tied_names = {name for group in tied for name in group}
    loaded_names = set(found) | {a for a, t in aliases.items() if t in found}
    persistent = {n for n in model_tensors if n not in buffer_names} | set(model.state_dict().keys())
    missing = sorted(n for n in persistent if n not in loaded_names
                     and not (n in tied_names and any(n in g and any(m in loaded_names for m in g) for g in tied)))
    unexpected = sorted(n for n in loaded_names if n not in model_tensors)
    if strict and (missing or unexpected):
        raise CheckpointMismatchError(f"{checkpoint} does not match the model: missing {missing[:5]}, unexpected "
                              f"{unexpected[:5]}; load with strict=False to ignore them")
    if missing:
        logger.warning("%d weights of the model are not in %s (they keep their values): %s", len(missing),
                       checkpoint, missing[:5])
    if unexpected:
        # "were not used when" is the phrase users' log filters (and Accelerate's tests) look for.
        logger.warning("%d weights of %s were not used when loading %s (the model has no such names): %s",
                       len(unexpected), checkpoint, type(model).__name__, unexpected[:5])
    disk_needs_folder = device_map is not None and any(v == DISK for v in device_map.values())

    # 2. Read each shard once, placing every tensor as it comes.
    offload_index: dict[str, dict[str, Any]] = {}
    state_folder = tempfile.mkdtemp(prefix="offload-state-") if offload_state_dict else None
    state_index: dict[str, Any] = {}
    try:
        for shard in shards:
            for name in shard.names():
                if found.get(name) != shard.path or name not in model_tensors:
                    continue
                _place(model, shard, name, model_tensors[name], device_map, dtype, keep_in_fp32_modules,
                       name in buffer_names, offload_buffers, offload_folder, offload_index, state_folder,
                       state_index, disk_needs_folder)
                for alias, target in aliases.items():
                    if target == name and alias in model_tensors and alias not in tied_names:
                        _place(model, shard, name, model_tensors[alias], device_map, dtype, keep_in_fp32_modules,
                               alias in buffer_names, offload_buffers, offload_folder, offload_index, state_folder,
                               state_index, disk_needs_folder, as_name=alias)
            shard.close()
        if state_folder is not None:
            load_offloaded_weights(model, state_index, state_folder)
    finally:
        if state_folder is not None:
            import shutil

            shutil.rmtree(state_folder, ignore_errors=True)
    retie_parameters(model, tied)
    # Tied names offloaded together read the same entry.
    for group in tied:
        source = next((offload_index[n] for n in group if n in offload_index), None)
        if source is not None:
            for name in group:
                offload_index.setdefault(name, source)
    return offload_index


def _place(model: nn.Module, shard: _Shard, name: str, current: torch.Tensor, device_map: dict[str, Any] | None,
           dtype: torch.dtype | None, keep_in_fp32_modules: list[str] | None, is_buffer: bool, offload_buffers: bool,
           offload_folder: Any, offload_index: dict[str, Any], state_folder: str | None, state_index: dict[str, Any],
           disk_needs_folder: bool, as_name: str | None = None) -> None:
    target_name = as_name or name
    stored_dtype = shard.entries[name]["dtype"]
    if stored_dtype.is_floating_point:
        if _keep_fp32(target_name, keep_in_fp32_modules):
            wanted = torch.float32
        elif dtype is not None:
            wanted = dtype
        elif current.device.type != META or current.dtype != stored_dtype:
            wanted = current.dtype
        else:
            wanted = stored_dtype
    else:
        wanted = stored_dtype
    device = _placement(target_name, device_map)
    if device is None:
        device = HOST if current.device.type == META else current.device
    if device == DISK and is_buffer and not offload_buffers:
        device = HOST  # buffers stay in memory; dispatch puts them on the execution device
    if device == DISK:
        if shard.safetensors and wanted == stored_dtype:
            entry = shard.entries[name]
            offload_index[target_name] = {"safetensors_file": str(shard.path.resolve()), "weight_name": name,
                                          "dtype": str(stored_dtype).removeprefix("torch."), "shape": entry["shape"],
                                          "offset": entry["offset"]}
        else:
            if offload_folder is None:
                raise ConfigError("the device map sends weights to disk that must be converted or copied; pass "
                                  "offload_folder (a directory for them)")
            offload_weight(shard.read(name).to(wanted), target_name, offload_folder, index=offload_index)
        set_module_tensor_to_device(model, target_name, META, dtype=wanted)
        return
    value = shard.read(name)
    if state_folder is not None and device == HOST:
        offload_weight(value.to(wanted), target_name, state_folder, index=state_index)
        # Empty until the folder is read back, and already of the wanted dtype, which the value
        # read back then keeps (a tensor is cast to the dtype of the one it replaces).
        set_module_tensor_to_device(model, target_name, META, dtype=wanted)
        return
    set_module_tensor_to_device(model, target_name, device, value=value, dtype=wanted)
    del value


# names a plugin contributes to this module (keys "utils.weights_loading.<name>"), served on first access
__getattr__ = surface_getattr("drivetrain.utils.weights_loading")
