"""Weights kept on disk: written one file per weight, read back by name.

An offload folder holds one raw file per weight (``<name>.dat``) and ``index.json``
describing each (dtype, shape), the layout Accelerate writes. An index entry may instead
point into a safetensors file (``safetensors_file``, ``weight_name``), so weights loaded from
a safetensors checkpoint are never copied: they are read from the checkpoint itself.

:class:`OffloadedWeightsLoader` maps each file once (:mod:`.mapped_files`): ``view(name)``
is a weight without a copy, for the hooks that stream offloaded weights at each forward;
``loader[name]`` is a tensor of its own, read in one copy.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch
from torch import nn

from ..checkpointing.dtypes import dtype_named
from ..checkpointing.paths import member_file
from ..checkpointing.safetensors_io import Header, read_header, tensor_nbytes
from ...kernel.errors import CheckpointError
from .mapped_files import MappedFiles
from .modeling import as_dtype
from ...kernel.contributed import surface_getattr

__all__ = [
    "offload_weight", "load_offloaded_weight", "save_offload_index", "offload_state_dict",
    "load_offloaded_weights", "PrefixedDataset", "OffloadedWeightsLoader", "extract_submodules_state_dict",
    "safetensors_entries",
]

INDEX_NAME = "index.json"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def safetensors_entries(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Every tensor of a safetensors file: dtype, shape and absolute byte range, from its
    header only. A header that does not fit the file is an error naming the file."""
    header = _header(path)
    return {name: {"dtype": dtype, "shape": shape, "offset": header.data_start + start,
                   "nbytes": tensor_nbytes(dtype, shape)} for start, name, dtype, shape in header.tensors}


def safetensors_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The ``__metadata__`` block of a safetensors file."""
    return _header(path).metadata


def _header(path: str | os.PathLike) -> Header:
    try:
        with open(path, "rb") as handle:
            return read_header(handle, path)
    except OSError as error:
        raise CheckpointError(f"cannot read {path}: {error.strerror}") from None


def read_tensor(path: str | os.PathLike, offset: int, dtype: torch.dtype, shape: Iterable[int]) -> torch.Tensor:
    """One tensor from ``path`` at byte ``offset``, read straight into its own memory (one copy)."""
    tensor = torch.empty(list(shape), dtype=dtype)
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return tensor
    target = memoryview(tensor.reshape(-1).view(torch.uint8).numpy())
    try:
        with open(path, "rb") as handle:
            done = 0
            while done < nbytes:
                count = os.preadv(handle.fileno(), [target[done:]], offset + done)
                if count == 0:
                    break
                done += count
    except OSError as error:
        raise CheckpointError(f"cannot read {nbytes} bytes at {offset} of {path} ({error.strerror}); load the "
                              "checkpoint again") from None
    if done < nbytes:
        raise CheckpointError(f"cannot read {nbytes} bytes at {offset} of {path}: the file is cut short or was "
                              "replaced: load the checkpoint again")
    return tensor


def offload_weight(weight: torch.Tensor, weight_name: str, offload_folder: str | os.PathLike,
                   index: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``weight`` to ``<offload_folder>/<weight_name>.dat`` and record it in ``index``."""
    index = {} if index is None else index
    os.makedirs(offload_folder, exist_ok=True)
    tensor = weight.detach().to("cpu").contiguous()
    path = Path(offload_folder) / f"{weight_name}.dat"
    # Written beside and renamed over: a model still reading the old file through a mapping
    # keeps the old one (overwritten in place, its mapping would lose pages under it).
    partial = path.with_name(f".{path.name}.partial")
    with open(partial, "wb") as handle:
        if tensor.numel():
            handle.write(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))
    os.replace(partial, path)
    index[weight_name] = {"dtype": _dtype_name(tensor.dtype), "shape": list(tensor.shape)}
    return index


def load_offloaded_weight(weight_file: str | os.PathLike, weight_info: dict[str, Any]) -> torch.Tensor:
    """Read a weight :func:`offload_weight` wrote, described by its index entry."""
    dtype = as_dtype(weight_info["dtype"])
    return read_tensor(weight_file, int(weight_info.get("offset", 0)), dtype, weight_info["shape"])


def read_offload_index(offload_folder: str | os.PathLike) -> dict[str, Any]:
    """``<offload_folder>/index.json`` (empty when there is none), every entry checked before
    any weight is read: a dtype and shape, and a weight file that is a regular file (a
    ``<name>.dat`` inside the folder, or the ``safetensors_file`` a load pointed it to)."""
    path = Path(offload_folder) / INDEX_NAME
    if not path.exists():
        return {}
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:
        raise CheckpointError(f"{path} is damaged ({type(error).__name__}); offload the weights again") from None
    if not isinstance(index, dict):
        raise CheckpointError(f"{path} is damaged: it is not a mapping of weight names; offload the weights again")
    for name, entry in index.items():
        where = f"{path} (entry {name!r})"
        if not isinstance(entry, dict) or not isinstance(entry.get("shape"), list) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in entry["shape"]):
            raise CheckpointError(f"{where} is damaged: each entry has a dtype and a shape; offload the weights again")
        dtype_named(entry.get("dtype"), where)
        source = entry.get("safetensors_file")
        if source is None:
            member_file(offload_folder, f"{name}.dat", where)
        elif not isinstance(source, str) or not os.path.isabs(source) or not os.path.isfile(source):
            raise CheckpointError(f"{where} points to {source!r}, which is not a weights file; offload the weights "
                                  "again")
    return index


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


def weight_view(weights: Mapping, key: str) -> torch.Tensor:
    """``weights[key]``, without a copy where ``weights`` maps files (a loader or a prefixed
    view of one); a plain mapping of tensors gives its own tensor."""
    if isinstance(weights, (OffloadedWeightsLoader, PrefixedDataset)):
        return weights.view(key)
    return weights[key]


def mapped_files_of(weights: Mapping | None) -> MappedFiles | None:
    """The :class:`MappedFiles` behind ``weights`` (through prefixed views), if any."""
    while isinstance(weights, PrefixedDataset):
        weights = weights.dataset
    return weights.mapped_files if isinstance(weights, OffloadedWeightsLoader) else None


class PrefixedDataset(Mapping):
    """A view of a weights mapping restricted to the keys that start with ``prefix``."""

    def __init__(self, dataset: Mapping, prefix: str) -> None:
        self.dataset = dataset
        self.prefix = prefix

    def __getitem__(self, key: str) -> Any:
        return self.dataset[f"{self.prefix}{key}"]

    def view(self, key: str) -> torch.Tensor:
        """The weight without a copy where the underlying mapping can give one (see
        :meth:`OffloadedWeightsLoader.view`)."""
        return weight_view(self.dataset, f"{self.prefix}{key}")

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
            index = read_offload_index(save_folder)
        self.index = {} if index is None else index
        self._keys = dict.fromkeys(self.state_dict)
        self._keys.update(dict.fromkeys(self.index))
        self.device = device
        self._headers: dict[str, dict[str, dict[str, Any]]] = {}
        self._files = MappedFiles()

    @property
    def all_keys(self) -> list[str]:
        """Every weight name, in-memory ones first (Accelerate's attribute)."""
        return list(self._keys)

    def __getitem__(self, key: str) -> torch.Tensor:
        if key in self.state_dict:
            return self.state_dict[key]
        tensor = self._read(key, copy=True)
        if self.device is not None:
            tensor = tensor.to(self.device)
        return tensor

    def view(self, key: str) -> torch.Tensor:
        """Weight ``key`` without a copy: the in-memory tensor, or a view of its file's
        mapping (mapped once, read lazily; the pages are the page cache's). A view in another
        dtype than its entry asks for, or for another ``device``, is converted (one copy)."""
        if key in self.state_dict:
            tensor = self.state_dict[key]
        else:
            tensor = self._read(key, copy=False)
        if self.device is not None:
            tensor = tensor.to(self.device)
        return tensor

    @property
    def mapped_files(self) -> MappedFiles:
        """The files this loader has mapped (what :meth:`view` returns views of)."""
        return self._files

    def _read(self, key: str, copy: bool) -> torch.Tensor:
        info = self.index[key]
        source = info.get("safetensors_file")
        if source is not None:
            if "offset" in info:
                entry = info
            else:
                header = self._headers.get(source)
                if header is None:
                    header = self._headers[source] = safetensors_entries(source)
                entry = header[info.get("weight_name", key)]
            offset, dtype, shape = int(entry["offset"]), as_dtype(entry["dtype"]), entry["shape"]
        else:
            if self.save_folder is None:
                raise CheckpointError(f"weight {key} was offloaded to a folder that was not given; pass offload_dir")
            source = Path(self.save_folder) / f"{key}.dat"
            offset, dtype, shape = int(info.get("offset", 0)), as_dtype(info["dtype"]), info["shape"]
        tensor = read_tensor(source, offset, dtype, shape) if copy else self._files.view(source, offset, dtype, shape)
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
__getattr__ = surface_getattr("drivetrain.utils.offload")
