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
                      metadata: dict[str, str] | None = None, fsync: bool = True) -> int:
    """Write ``tensors`` to ``path`` in safetensors format; returns the file's size.

    Tensors that share memory are written once each under their own names (the format
    has no aliasing), so callers deduplicate first when that matters.
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
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)))
        handle.write(encoded)
        for view in views:
            handle.write(view)
        _finish(handle, fsync)
    return 8 + len(encoded) + offset


def _finish(handle: BinaryIO, fsync: bool) -> None:
    handle.flush()
    if fsync:
        os.fsync(handle.fileno())


def read_safetensors(path: str | os.PathLike, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file; a damaged file is an error naming it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(os.fspath(path), device=str(device))
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{path} is damaged or not a safetensors file ({error}); "
                              "load an earlier checkpoint or save again") from None


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file (without reading its tensors)."""
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
    except (OSError, struct.error, ValueError) as error:
        raise CheckpointError(f"{path} is damaged or not a safetensors file ({error})") from None
    return header.get("__metadata__", {})
