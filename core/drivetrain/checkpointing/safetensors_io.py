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
from typing import Any, BinaryIO

import torch

from ..errors import CheckpointError
from .checksums import Recorder, Verifier, new_hasher

_DTYPE_NAMES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL", torch.complex64: "C64",
    torch.uint16: "U16", torch.uint32: "U32", torch.uint64: "U64",
}
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        _DTYPE_NAMES[getattr(torch, _name)] = {"float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}[_name]
_ALIGN = 8
_DTYPES_BY_NAME = {name: dtype for dtype, name in _DTYPE_NAMES.items()}


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

    tensors: dict[str, torch.Tensor] = {}
    hasher = new_hasher() if verifier is not None and verifier.expected(path) is not None else None
    try:
        with open(path, "rb") as handle:
            raw_length = handle.read(8)
            if len(raw_length) != 8:
                raise damaged("shorter than its header")
            (length,) = struct.unpack("<Q", raw_length)
            size = os.fstat(handle.fileno()).st_size - 8 - length
            if size < 0:
                raise damaged(f"header length {length} exceeds the file")
            raw_header = handle.read(length)
            if hasher is not None:
                hasher.update(raw_length)
                hasher.update(raw_header)
            header = json.loads(raw_header)
            if not isinstance(header, dict):
                raise damaged("the header is not a mapping")
            entries = []
            for name, entry in header.items():
                if name == "__metadata__":
                    continue
                try:
                    dtype = _DTYPES_BY_NAME[entry["dtype"]]
                    shape = [int(n) for n in entry["shape"]]
                    start, end = (int(n) for n in entry["data_offsets"])
                except (KeyError, TypeError, ValueError):
                    raise damaged(f"bad entry for tensor {name!r}") from None
                tensor = torch.empty(shape, dtype=dtype)
                if not 0 <= start <= end <= size or end - start != tensor.numel() * tensor.element_size():
                    raise damaged(f"tensor {name!r} does not fit its bytes")
                entries.append((start, name, tensor))
            position = 0
            for start, name, tensor in sorted(entries, key=lambda item: item[0]):
                if hasher is not None and start != position:
                    if start < position or not _hash_span(handle, 8 + length + position, 8 + length + start, hasher):
                        raise damaged(f"tensor {name!r} overlaps another one")
                handle.seek(8 + length + start)
                if not _read_into(handle, tensor, hasher):
                    raise damaged(f"data of tensor {name!r} is cut short")
                position = start + tensor.numel() * tensor.element_size()
                tensors[name] = tensor
            if hasher is not None:
                _hash_span(handle, 8 + length + position, 8 + length + size, hasher)
                verifier.check(path, hasher.hexdigest())
    except OSError as error:
        raise CheckpointError(f"cannot read {path}: {error.strerror}") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise damaged(f"unreadable header: {error}") from None
    if str(device) != "cpu":  # moved only once the whole file is verified
        tensors = {name: tensor.to(device) for name, tensor in tensors.items()}
    return tensors


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file (without reading its tensors)."""
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
    except (OSError, struct.error, ValueError) as error:
        raise CheckpointError(f"{path} is damaged or not a safetensors file ({error})") from None
    return header.get("__metadata__", {})
