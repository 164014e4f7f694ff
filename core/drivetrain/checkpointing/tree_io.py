"""Saving nested state (state dicts of optimizers, schedulers, RNGs, ...) without pickle.

A state tree is split into its tensors, written to a safetensors file, and its structure
(dicts with any scalar keys, lists, tuples, numbers, strings, numpy arrays), written as
JSON. Reading it back executes no code, whatever the files contain. Objects of other types
are refused when saving, with their path in the tree.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np
import torch

from ..errors import CheckpointError
from .safetensors_io import read_safetensors, write_safetensors

FORMAT = "drivetrain-tree/1"


class _Splitter:
    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self._by_storage: dict[tuple, str] = {}

    def tensor(self, value: torch.Tensor) -> dict[str, Any]:
        # One file entry per distinct tensor; a tensor seen twice (tied weights) is referenced twice.
        identity = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape),
                    tuple(value.stride()), value.dtype) if value.numel() else None
        key = self._by_storage.get(identity) if identity else None
        if key is None:
            key = f"t{len(self.tensors)}"
            self.tensors[key] = value
            if identity:
                self._by_storage[identity] = key
        node = {"__t": "tensor", "k": key}
        if value.requires_grad and value.is_leaf:
            node["grad"] = True
        return node

    def split(self, value: Any, path: str) -> Any:
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, np.ndarray):
            return {"__t": "ndarray", "k": self.tensor(torch.from_numpy(np.ascontiguousarray(value)))["k"],
                    "dtype": str(value.dtype)}
        if isinstance(value, np.generic):
            return self.split(value.item(), path)
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"__t": "float", "v": repr(value)}
        if isinstance(value, torch.dtype):
            return {"__t": "dtype", "v": str(value).removeprefix("torch.")}
        if isinstance(value, (list, tuple)):
            items = [self.split(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return items if isinstance(value, list) else {"__t": "tuple", "v": items}
        if isinstance(value, dict):
            if all(isinstance(k, str) for k in value) and "__t" not in value:
                return {k: self.split(v, f"{path}.{k}") for k, v in value.items()}
            return {"__t": "dict", "v": [[self.split(k, f"{path}<key>"), self.split(v, f"{path}[{k!r}]")]
                                         for k, v in value.items()]}
        raise CheckpointError(
            f"cannot checkpoint {path or 'the state'}: a {type(value).__name__} is not a tensor, number, "
            "string, list or dict; make state_dict() return plain data"
        )


def _join(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(node, list):
        return [_join(v, tensors) for v in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("__t")
    if kind is None:
        return {k: _join(v, tensors) for k, v in node.items()}
    if kind == "tensor":
        return tensors[node["k"]]
    if kind == "ndarray":
        return tensors[node["k"]].numpy().astype(node["dtype"], copy=False)
    if kind == "tuple":
        return tuple(_join(v, tensors) for v in node["v"])
    if kind == "dict":
        return {_join(k, tensors): _join(v, tensors) for k, v in node["v"]}
    if kind == "float":
        return float(node["v"])
    if kind == "dtype":
        return getattr(torch, node["v"])
    raise CheckpointError(f"unknown node type {kind!r} in a checkpoint: written by a newer drivetrain?")


def save_tree(tree: Any, prefix: str | os.PathLike, fsync: bool = True) -> list[str]:
    """Write ``tree`` as ``<prefix>.json`` (+ ``<prefix>.safetensors`` when it has tensors).

    Returns the file names written.
    """
    splitter = _Splitter()
    structure = splitter.split(tree, "")
    prefix = os.fspath(prefix)
    written = []
    if splitter.tensors:
        write_safetensors(prefix + ".safetensors", splitter.tensors, metadata={"format": FORMAT}, fsync=fsync)
        written.append(os.path.basename(prefix) + ".safetensors")
    with open(prefix + ".json", "w", encoding="utf-8") as handle:
        json.dump({"format": FORMAT, "tensors": bool(splitter.tensors), "tree": structure}, handle)
        handle.flush()
        if fsync:
            os.fsync(handle.fileno())
    written.append(os.path.basename(prefix) + ".json")
    return written


def load_tree(prefix: str | os.PathLike, device: str | torch.device = "cpu") -> Any:
    """Read what :func:`save_tree` wrote; a damaged file is an error naming it."""
    prefix = os.fspath(prefix)
    path = prefix + ".json"
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing from the checkpoint") from None
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path} is damaged ({error}); load an earlier checkpoint") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a drivetrain state file (format {document.get('format')!r})"
                              if isinstance(document, dict) else f"{path} is not a drivetrain state file")
    tensors = read_safetensors(prefix + ".safetensors", device) if document.get("tensors") else {}
    try:
        return _join(document["tree"], tensors)
    except KeyError as error:
        raise CheckpointError(f"{path} refers to tensor {error} that {prefix}.safetensors does not hold; "
                              "the checkpoint is damaged") from None
