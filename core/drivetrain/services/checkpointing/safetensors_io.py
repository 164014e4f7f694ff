"""Writing and reading safetensors files.

The writer streams each tensor's bytes straight from its memory to the file (no copy of
the whole state in memory, unlike building the file as one bytes object), which matters
for checkpoints of hundreds of megabytes. Files are standard safetensors: the
``safetensors`` library reads them.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, BinaryIO, NamedTuple

import torch

from ...kernel.errors import CheckpointError
from .checksums import Recorder, Verifier, new_hasher
from .dtypes import SAFETENSORS_DTYPES
from .paths import regular_file

_DTYPE_NAMES = {dtype: code for code, dtype in SAFETENSORS_DTYPES.items()}
_ALIGN = 8


class Header(NamedTuple):
    """A safetensors header, checked against its file: the data start and each tensor in file order."""

    data_start: int
    tensors: list[tuple[int, str, torch.dtype, list[int]]]  # (offset in the data, name, dtype, shape)
    metadata: dict[str, str]
    raw: bytes  # the length prefix and the header, as read (for checksums)


def storage_pointer(tensor: torch.Tensor) -> int | None:
    """The address of ``tensor``'s memory, to tell tensors that share it (tied weights);
    ``None`` for a tensor of a lazy device, which has no host-visible memory: it counts as
    its own tensor."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


def _raw_bytes(tensor: torch.Tensor) -> memoryview:
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    tensor = tensor.contiguous()
    if tensor.numel() == 0:
        return memoryview(b"")
    # A byte view of the same memory: no copy, works for every dtype (bf16 included).
    return memoryview(tensor.view(-1).view(torch.uint8).numpy())


def write_safetensors(path: str | os.PathLike, tensors: dict[str, torch.Tensor],
                      metadata: dict[str, str] | None = None, fsync: bool = True,
                      recorder: Recorder | None = None, record_as: str | os.PathLike | None = None) -> int:
    """Write ``tensors`` to ``path`` in safetensors format; returns the file's size.

    Tensors that share memory are written once each under their own names (the format
    has no aliasing), so callers deduplicate first when that matters. With ``recorder``
    the file's checksum is computed from the bytes as they are written and recorded under
    ``record_as`` (default ``path``).
    """
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    views = []
    offset = 0
    for name, tensor in tensors.items():
        if tensor.dtype not in _DTYPE_NAMES:
            raise CheckpointError(f"cannot write tensor {name!r} of dtype {tensor.dtype} to safetensors")
        view = _raw_bytes(tensor)
        header[name] = {"dtype": _DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + view.nbytes]}
        offset += view.nbytes
        views.append(view)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % _ALIGN)
    hasher = new_hasher() if recorder is not None else None
    with open(path, "wb") as handle:
        for chunk in (struct.pack("<Q", len(encoded)), encoded, *views):
            handle.write(chunk)
            if hasher is not None:
                hasher.update(chunk)
        _finish(handle, fsync)
    if recorder is not None:
        recorder.record(record_as if record_as is not None else path, hasher.hexdigest())
    return 8 + len(encoded) + offset


def _finish(handle: BinaryIO, fsync: bool) -> None:
    handle.flush()
    if fsync:
        os.fsync(handle.fileno())


def _read_into(handle: BinaryIO, tensor: torch.Tensor, hasher: Any = None) -> bool:
    """Fill ``tensor``'s memory from the file's current position; False when the file ends first."""
    if tensor.numel() == 0:
        return True
    return _read_view(handle, memoryview(tensor.view(-1).view(torch.uint8).numpy()), hasher)


def _read_view(handle: BinaryIO, view: memoryview, hasher: Any = None) -> bool:
    done = 0
    while done < len(view):
        count = handle.readinto(view[done:])
        if not count:
            return False
        done += count
    if hasher is not None:
        hasher.update(view)  # just read: still in the CPU caches for large parts of it
    return True


def _hash_span(handle: BinaryIO, start: int, end: int, hasher: Any) -> bool:
    """Hash bytes the tensors do not cover (gaps a foreign writer may leave), so the whole file is checked."""
    if end > start:
        handle.seek(start)
        return _read_view(handle, memoryview(bytearray(end - start)), hasher)
    return True


def read_header(handle: BinaryIO, path: str | os.PathLike) -> Header:
    """Read and check the header of the safetensors file open in ``handle``: a mapping of
    tensors whose dtype and shape agree with their byte ranges, which lie inside the file
    and do not overlap, and string metadata. Anything else is an error naming the file."""
    def damaged(reason: str) -> CheckpointError:
        return CheckpointError(f"{path} is damaged or not a safetensors file ({reason}); "
                               "load an earlier checkpoint or save again")

    raw_length = handle.read(8)
    if len(raw_length) != 8:
        raise damaged("shorter than its header")
    (length,) = struct.unpack("<Q", raw_length)
    size = os.fstat(handle.fileno()).st_size - 8 - length
    if size < 0:
        raise damaged(f"header length {length} exceeds the file")
    raw_header = handle.read(length)
    try:
        header = json.loads(raw_header)
    except (ValueError, UnicodeDecodeError) as error:
        raise damaged(f"unreadable header: {error}") from None
    except RecursionError:
        raise damaged("the header is nested too deeply") from None
    if not isinstance(header, dict):
        raise damaged("the header is not a mapping")
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise damaged("its __metadata__ is not a mapping of strings")
    tensors = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = SAFETENSORS_DTYPES[entry["dtype"]]
            shape = [_count(n) for n in entry["shape"]]
            start, end = (_count(n) for n in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise damaged(f"bad entry for tensor {name!r}") from None
        if not start <= end <= size or end - start != tensor_nbytes(dtype, shape):
            raise damaged(f"tensor {name!r} does not fit its bytes")
        tensors.append((start, name, dtype, shape))
    tensors.sort(key=lambda item: item[0])
    position = 0
    for start, name, dtype, shape in tensors:
        if start < position:
            raise damaged(f"tensor {name!r} overlaps another one")
        position = max(position, start + tensor_nbytes(dtype, shape))
    return Header(8 + length, tensors, metadata, raw_length + raw_header)


def _count(value: Any) -> int:
    """A shape extent or offset: a non-negative JSON integer (not a bool, a float or a string)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(value)
    return value


def tensor_nbytes(dtype: torch.dtype, shape: list[int]) -> int:
    numel = 1
    for extent in shape:
        numel *= extent
    return numel * dtype.itemsize


def read_safetensors(path: str | os.PathLike, device: str | torch.device = "cpu",
                     verifier: Verifier | None = None) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file; a damaged file is an error naming it.

    Each tensor is read straight from the file into its own memory, in file order: one
    sequential pass and no intermediate copy. When ``verifier`` holds a checksum for the
    file, the bytes are hashed as they are read and a mismatch is an error naming the file.
    """
    def damaged(reason: str) -> CheckpointError:
        return CheckpointError(f"{path} is damaged or not a safetensors file ({reason}); "
                               "load an earlier checkpoint or save again")

    regular_file(path)  # opening a FIFO would wait for a writer forever
    tensors: dict[str, torch.Tensor] = {}
    hasher = new_hasher() if verifier is not None and verifier.expected(path) is not None else None
    try:
        with open(path, "rb") as handle:
            header = read_header(handle, path)
            base = header.data_start
            size = os.fstat(handle.fileno()).st_size - base
            if hasher is not None:
                hasher.update(header.raw)
            position = 0
            for start, name, dtype, shape in header.tensors:
                tensor = torch.empty(shape, dtype=dtype)
                if hasher is not None and not _hash_span(handle, base + position, base + start, hasher):
                    raise damaged(f"data of tensor {name!r} is cut short")
                handle.seek(base + start)
                if not _read_into(handle, tensor, hasher):
                    raise damaged(f"data of tensor {name!r} is cut short")
                position = start + tensor.numel() * tensor.element_size()
                tensors[name] = tensor
            if hasher is not None:
                _hash_span(handle, base + position, base + size, hasher)
                verifier.check(path, hasher.hexdigest())
    except OSError as error:
        raise CheckpointError(f"cannot read {path}: {error.strerror}") from None
    if str(device) != "cpu":  # moved only once the whole file is verified
        tensors = {name: tensor.to(device) for name, tensor in tensors.items()}
    return tensors


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file (without reading its tensors)."""
    regular_file(path)
    try:
        with open(path, "rb") as handle:
            return read_header(handle, path).metadata
    except OSError as error:
        raise CheckpointError(f"cannot read {path}: {error.strerror}") from None
