"""Weights kept on disk and read back one tensor at a time through a memory map.

An offload folder holds one raw file per weight (``<name>.dat``) and ``index.json``
describing each (dtype, shape), the layout Accelerate writes. An index entry may instead
point into a safetensors file (``safetensors_file``, ``weight_name``), so weights loaded from
a safetensors checkpoint are never copied: they are read from the checkpoint itself.

Reading maps only the pages of the one tensor asked for, copies them into the tensor's own
memory and unmaps them, so the resident memory never holds a whole file.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import torch
from torch import nn

from ..errors import CheckpointError
from .modeling import as_dtype
from ..public_names import contributed_getattr

__all__ = [
    "offload_weight", "load_offloaded_weight", "save_offload_index", "offload_state_dict",
    "load_offloaded_weights", "PrefixedDataset", "OffloadedWeightsLoader", "extract_submodules_state_dict",
    "safetensors_entries",
]

INDEX_NAME = "index.json"
_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "C64": torch.complex64, "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64,
}
for _name, _code in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
    if hasattr(torch, _name):
        _SAFETENSORS_DTYPES[_code] = getattr(torch, _name)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def safetensors_entries(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Every tensor of a safetensors file: dtype, shape and absolute byte range, from its
    header only. A header that does not fit the file is an error naming the file."""
    def damaged(reason: str) -> CheckpointError:
        return CheckpointError(f"{path} is damaged or not a safetensors file ({reason}); replace it with a good copy")

    try:
        with open(path, "rb") as handle:
            raw = handle.read(8)
            if len(raw) != 8:
                raise damaged("shorter than its header")
            (length,) = struct.unpack("<Q", raw)
            file_size = os.fstat(handle.fileno()).st_size
            if length > file_size - 8:
                raise damaged(f"header length {length} exceeds the file")
            header = json.loads(handle.read(length))
    except OSError as error:
        raise CheckpointError(f"cannot read {path}: {error.strerror}") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise damaged(f"unreadable header: {error}") from None
    if not isinstance(header, dict):
        raise damaged("the header is not a mapping")
    base = 8 + length
    entries: dict[str, dict[str, Any]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _SAFETENSORS_DTYPES[entry["dtype"]]
            shape = [int(n) for n in entry["shape"]]
            start, end = (int(n) for n in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise damaged(f"bad entry for tensor {name!r}") from None
        numel = int(np.prod(shape)) if shape else 1
        if not 0 <= start <= end <= file_size - base or end - start != numel * torch.empty(0, dtype=dtype).element_size():
            raise damaged(f"tensor {name!r} does not fit its bytes")
        entries[name] = {"dtype": dtype, "shape": shape, "offset": base + start, "nbytes": end - start}
    return entries


def safetensors_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The ``__metadata__`` block of a safetensors file."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        return json.loads(handle.read(length)).get("__metadata__", {}) or {}


def read_mapped(path: str | os.PathLike, offset: int, dtype: torch.dtype, shape: Iterable[int]) -> torch.Tensor:
    """One tensor from ``path`` at byte ``offset``, read through a memory map of its pages only."""
    tensor = torch.empty(list(shape), dtype=dtype)
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return tensor
    base = offset - offset % mmap.ALLOCATIONGRANULARITY
    try:
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), length=offset - base + nbytes, offset=base, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {nbytes} bytes at {offset} of {path} ({error}); the file is cut short "
                              "or was replaced: load the checkpoint again") from None
    try:
        source = np.frombuffer(mapped, dtype=np.uint8, count=nbytes, offset=offset - base)
        tensor.reshape(-1).view(torch.uint8).numpy()[:] = source
        del source  # the map cannot close while a view of it lives
    finally:
        mapped.close()
    return tensor


def offload_weight(weight: torch.Tensor, weight_name: str, offload_folder: str | os.PathLike,
                   index: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``weight`` to ``<offload_folder>/<weight_name>.dat`` and record it in ``index``."""
    index = {} if index is None else index
    os.makedirs(offload_folder, exist_ok=True)
    tensor = weight.detach().to("cpu").contiguous()
    path = Path(offload_folder) / f"{weight_name}.dat"
    with open(path, "wb") as handle:
        if tensor.numel():
            handle.write(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))
    index[weight_name] = {"dtype": _dtype_name(tensor.dtype), "shape": list(tensor.shape)}
    return index


def load_offloaded_weight(weight_file: str | os.PathLike, weight_info: dict[str, Any]) -> torch.Tensor:
    """Read a weight :func:`offload_weight` wrote, described by its index entry."""
    dtype = as_dtype(weight_info["dtype"])
    return read_mapped(weight_file, int(weight_info.get("offset", 0)), dtype, weight_info["shape"])


def save_offload_index(index: dict[str, Any], offload_folder: str | os.PathLike) -> None:
    """Merge ``index`` into ``<offload_folder>/index.json``."""
    if not index:
        return
    path = Path(offload_folder) / INDEX_NAME
    current: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    current.update({name: _json_entry(entry) for name, entry in index.items()})
    os.makedirs(offload_folder, exist_ok=True)
    temporary = path.with_name(f".{INDEX_NAME}.partial")
    temporary.write_text(json.dumps(current, indent=2))
    os.replace(temporary, path)


def _json_entry(entry: dict[str, Any]) -> dict[str, Any]:
    return {key: _dtype_name(value) if isinstance(value, torch.dtype) else value for key, value in entry.items()}


def offload_state_dict(save_dir: str | os.PathLike, state_dict: dict[str, torch.Tensor]) -> None:
    """Write every tensor of ``state_dict`` into the offload folder ``save_dir``, with its index."""
    index: dict[str, Any] = {}
    for name, tensor in state_dict.items():
        offload_weight(tensor, name, save_dir, index=index)
    save_offload_index(index, save_dir)


def load_offloaded_weights(model: nn.Module, index: dict[str, Any], offload_folder: str | os.PathLike) -> None:
    """Put every weight of ``index`` back into ``model``, on the CPU."""
    from .modeling import set_module_tensor_to_device

    if not index:
        return
    loader = OffloadedWeightsLoader(save_folder=offload_folder, index=index)
    for name in index:
        set_module_tensor_to_device(model, name, "cpu", value=loader[name])


class PrefixedDataset(Mapping):
    """A view of a weights mapping restricted to the keys that start with ``prefix``."""

    def __init__(self, dataset: Mapping, prefix: str) -> None:
        self.dataset = dataset
        self.prefix = prefix

    def __getitem__(self, key: str) -> Any:
        return self.dataset[f"{self.prefix}{key}"]

    def __contains__(self, key: object) -> bool:
        return f"{self.prefix}{key}" in self.dataset

    def __iter__(self) -> Iterator[str]:
        cut = len(self.prefix)
        return iter([key[cut:] for key in self.dataset if key.startswith(self.prefix)])

    def __len__(self) -> int:
        return len(self.dataset)


class OffloadedWeightsLoader(Mapping):
    """Weights by name: from ``state_dict`` (kept in memory), else read from disk per ``index``
    (entries of an offload folder, or pointing into safetensors files).

    Looking keys up costs one dictionary access; building it is linear in the number of
    weights (no key is compared with every other).
    """

    def __init__(self, state_dict: dict[str, torch.Tensor] | None = None, save_folder: str | os.PathLike | None = None,
                 index: dict[str, Any] | None = None, device: Any = None) -> None:
        if state_dict is None and save_folder is None and index is None:
            raise CheckpointError("OffloadedWeightsLoader needs a state_dict, a save_folder or an index")
        self.state_dict = {} if state_dict is None else state_dict
        self.save_folder = save_folder
        if index is None and save_folder is not None:
            path = Path(save_folder) / INDEX_NAME
            index = json.loads(path.read_text()) if path.exists() else {}
        self.index = {} if index is None else index
        self._keys = dict.fromkeys(self.state_dict)
        self._keys.update(dict.fromkeys(self.index))
        self.device = device
        self._headers: dict[str, dict[str, dict[str, Any]]] = {}

    @property
    def all_keys(self) -> list[str]:
        """Every weight name, in-memory ones first (Accelerate's attribute)."""
        return list(self._keys)

    def __getitem__(self, key: str) -> torch.Tensor:
        if key in self.state_dict:
            return self.state_dict[key]
        info = self.index[key]
        if info.get("safetensors_file") is not None:
            tensor = self._read_safetensors(key, info)
        else:
            if self.save_folder is None:
                raise CheckpointError(f"weight {key} was offloaded to a folder that was not given; pass offload_dir")
            tensor = load_offloaded_weight(Path(self.save_folder) / f"{key}.dat", info)
        if self.device is not None:
            tensor = tensor.to(self.device)
        return tensor

    def _read_safetensors(self, key: str, info: dict[str, Any]) -> torch.Tensor:
        path = info["safetensors_file"]
        if "offset" in info:
            entry = info
        else:
            header = self._headers.get(path)
            if header is None:
                header = self._headers[path] = safetensors_entries(path)
            entry = header[info.get("weight_name", key)]
        tensor = read_mapped(path, int(entry["offset"]), as_dtype(entry["dtype"]), entry["shape"])
        wanted = as_dtype(info.get("dtype"))
        if wanted is not None and tensor.dtype != wanted:
            tensor = tensor.to(wanted)
        return tensor

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def extract_submodules_state_dict(state_dict: dict[str, torch.Tensor], submodule_names: list[str]) -> dict[str, torch.Tensor]:
    """The entries of ``state_dict`` that belong to one of ``submodule_names`` (or their children)."""
    wanted = set(submodule_names)
    if "" in wanted:
        return dict(state_dict)
    result = {}
    for key, value in state_dict.items():
        if key.rpartition(".")[0] in wanted:  # the common case: a module's own weight
            result[key] = value
            continue
        probe = key
        while probe:
            if probe in wanted:
                result[key] = value
                break
            probe = probe.rpartition(".")[0]
    return result


# names a plugin contributes to this module (keys "utils.offload.<name>"), served on first access
__getattr__ = contributed_getattr(__name__)
