"""Saving nested state (state dicts of optimizers, schedulers, RNGs, ...) without pickle.

A state tree is split into its tensors, written to safetensors files (several when it is
large, so threads can write them side by side), and its structure (dicts with any scalar
keys, lists, tuples, numbers, strings, numpy arrays), written as JSON. Reading it back executes no code, whatever the files contain. Objects of other types
are refused when saving, with their path in the tree.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Callable

import numpy as np
import torch

from ...kernel.errors import CheckpointError
from .checksums import Recorder, Verifier, bytes_digest
from .dtypes import dtype_named
from .io_pool import FileJobs
from .paths import member_file
from .safetensors_io import read_safetensors, storage_pointer, write_safetensors

FORMAT = "drivetrain-tree/2"  # 2: tensors in a list of files
_READABLE = ("drivetrain-tree/1", FORMAT)


class _Splitter:
    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self._by_storage: dict[tuple, str] = {}

    def tensor(self, value: torch.Tensor) -> dict[str, Any]:
        # One file entry per distinct tensor; a tensor seen twice (tied weights) is referenced twice.
        pointer = storage_pointer(value) if value.numel() else None
        identity = (pointer, value.storage_offset(), tuple(value.shape), tuple(value.stride()),
                    value.dtype) if pointer is not None else None
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


# numpy arrays come back only as plain numeric data (never ``object``, which pickles).
_NDARRAY_KINDS = "biufc"
_FLOATS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class _Damaged(Exception):
    """A node of the tree is not what :class:`_Splitter` writes."""


def _join(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Rebuild the value :class:`_Splitter` split; any node it does not write raises ``_Damaged``."""
    if isinstance(node, list):
        return [_join(v, tensors) for v in node]
    if not isinstance(node, dict):
        return node  # JSON scalars: None, bool, int, float, str
    kind = node.get("__t")
    if kind is None:
        return {k: _join(v, tensors) for k, v in node.items()}
    if kind == "tensor":
        return tensors[_field(node, "k", str)]
    if kind == "ndarray":
        dtype = np.dtype(_field(node, "dtype", str))
        if dtype.kind not in _NDARRAY_KINDS:
            raise _Damaged(f"an array of dtype {dtype} (only numeric arrays are stored)")
        return tensors[_field(node, "k", str)].numpy().astype(dtype, copy=False)
    if kind == "tuple":
        return tuple(_join(v, tensors) for v in _field(node, "v", list))
    if kind == "dict":
        pairs = _field(node, "v", list)
        if not all(isinstance(pair, list) and len(pair) == 2 for pair in pairs):
            raise _Damaged("a dict node whose items are not pairs")
        result = {}
        for key, value in pairs:
            key = _join(key, tensors)
            if not isinstance(key, (str, int, float, bool, tuple)) and key is not None:
                raise _Damaged(f"a dict key of type {type(key).__name__}")
            result[key] = _join(value, tensors)
        return result
    if kind == "float":
        text = _field(node, "v", str)
        if text not in _FLOATS:
            raise _Damaged(f"the float {text!r} (only inf, -inf and nan are stored this way)")
        return _FLOATS[text]
    if kind == "dtype":
        return dtype_named(_field(node, "v", str), "a dtype node")
    raise CheckpointError(f"unknown node type {kind!r} in a checkpoint: written by a newer drivetrain?")


def _field(node: dict[str, Any], name: str, kind: type) -> Any:
    value = node.get(name)
    if not isinstance(value, kind):
        raise _Damaged(f"a {node.get('__t')!r} node whose {name!r} is not a {kind.__name__}")
    return value


def _split_files(tensors: dict[str, torch.Tensor], limit: int | None) -> list[dict[str, torch.Tensor]]:
    groups: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if limit is not None and groups[-1] and size + nbytes > limit:
            groups.append({})
            size = 0
        groups[-1][key] = tensor
        size += nbytes
    return groups


def save_tree(tree: Any, prefix: str | os.PathLike, fsync: bool = False, jobs: FileJobs | None = None,
              shard_bytes: int | None = None, recorder: Recorder | None = None) -> list[str]:
    """Write ``tree`` as ``<prefix>.json`` plus its tensors in safetensors files.

    Tensors go to ``<prefix>.safetensors``, or to ``<prefix>-00001-of-0000N.safetensors``
    files of about ``shard_bytes`` each. With ``jobs`` the tensor files are written on its
    threads and are complete only after ``jobs.wait()``. With ``recorder`` each file's
    checksum is recorded as it is written. Returns the file names.
    """
    splitter = _Splitter()
    structure = splitter.split(tree, "")
    prefix = os.fspath(prefix)
    stem = os.path.basename(prefix)
    groups = _split_files(splitter.tensors, shard_bytes) if splitter.tensors else []
    names = ([f"{stem}.safetensors"] if len(groups) == 1 else
             [f"{stem}-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))])
    directory = os.path.dirname(prefix)
    runner = jobs or FileJobs(threads=1)
    for name, group in zip(names, groups):
        runner.submit(write_safetensors, os.path.join(directory, name), group, metadata={"format": FORMAT},
                      fsync=fsync, recorder=recorder)
    if jobs is None:
        runner.wait()
    document = json.dumps({"format": FORMAT, "files": names, "tree": structure}).encode("utf-8")
    with open(prefix + ".json", "wb") as handle:
        handle.write(document)
        handle.flush()
        if fsync:
            os.fsync(handle.fileno())
    if recorder is not None:
        recorder.record(prefix + ".json", bytes_digest(document))
    return [*names, stem + ".json"]


def load_tree(prefix: str | os.PathLike, device: str | torch.device = "cpu", verifier: Verifier | None = None) -> Any:
    """Read what :func:`save_tree` wrote; a damaged file is an error naming it."""
    return load_tree_later(prefix, device, verifier=verifier)()


def load_tree_later(prefix: str | os.PathLike, device: str | torch.device = "cpu",
                    jobs: FileJobs | None = None, verifier: Verifier | None = None) -> Callable[[], Any]:
    """Start reading a tree (its tensor files on ``jobs``' threads); call the result for the tree.

    The JSON document is read and checked at once, so a missing or damaged one fails here;
    with ``verifier`` every file is checked against its recorded checksum as it is read.
    """
    prefix = os.fspath(prefix)
    path = prefix + ".json"
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
        if verifier is not None:
            verifier.check(path, bytes_digest(raw))
        document = json.loads(raw)
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing from the checkpoint") from None
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path} is damaged ({error}); load an earlier checkpoint") from None
    except RecursionError:
        raise CheckpointError(f"{path} is damaged (nested too deeply); load an earlier checkpoint") from None
    if not isinstance(document, dict) or document.get("format") not in _READABLE:
        raise CheckpointError(f"{path} is not a drivetrain state file (format {document.get('format')!r})"
                              if isinstance(document, dict) else f"{path} is not a drivetrain state file")
    directory = os.path.dirname(prefix)
    if "files" in document:
        names = document["files"]
        if not isinstance(names, list):
            raise CheckpointError(f"{path} lists its tensor files wrongly; the checkpoint is damaged")
        files = [member_file(directory, name, path) for name in names]
    else:  # format 1: one file or none
        names = [os.path.basename(prefix) + ".safetensors"] if document.get("tensors") else []
        files = [os.path.join(directory, name) for name in names]
    futures = [(jobs or FileJobs(threads=1)).submit(read_safetensors, file, device, verifier) for file in files]

    def finish() -> Any:
        tensors: dict[str, torch.Tensor] = {}
        for future in futures:
            tensors.update(future.result())
        try:
            return _join(document.get("tree"), tensors)
        except KeyError as error:
            raise CheckpointError(f"{path} refers to tensor {error} that its safetensors files do not hold; "
                                  "the checkpoint is damaged") from None
        except (_Damaged, TypeError) as error:
            raise CheckpointError(f"{path} is damaged: it holds {error}; load an earlier checkpoint") from None
        except RecursionError:
            raise CheckpointError(f"{path} is damaged: its tree is nested too deeply; load an earlier "
                                  "checkpoint") from None

    return finish
