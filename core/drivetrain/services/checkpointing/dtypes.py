"""Dtype names as stored in files, read back through a fixed allow-list.

A name read from a file is looked up here and nowhere else: ``getattr(torch, name)`` on a
name from a file could return any attribute of torch (``"load"``), not a dtype.
"""

from __future__ import annotations

import torch

from ...kernel.errors import CheckpointError

_NAMES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
          "complex32", "complex64", "complex128", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2",
          "float8_e4m3fnuz", "float8_e5m2fnuz", "double", "float", "half", "long", "int", "short", "cfloat",
          "cdouble", "chalf")
#: ``"float32"`` -> ``torch.float32``, for every dtype this torch has (names without ``torch.``).
TORCH_DTYPES: dict[str, torch.dtype] = {
    name: value for name in _NAMES if isinstance(value := getattr(torch, name, None), torch.dtype)}
#: safetensors' codes (``"F32"``) -> torch dtypes.
SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    code: TORCH_DTYPES[name] for code, name in (
        ("F64", "float64"), ("F32", "float32"), ("F16", "float16"), ("BF16", "bfloat16"), ("I64", "int64"),
        ("I32", "int32"), ("I16", "int16"), ("I8", "int8"), ("U8", "uint8"), ("BOOL", "bool"), ("C64", "complex64"),
        ("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"), ("F8_E4M3", "float8_e4m3fn"),
        ("F8_E5M2", "float8_e5m2")) if name in TORCH_DTYPES}


def dtype_named(name: object, source: str = "the checkpoint") -> torch.dtype:
    """The torch dtype ``name`` (``"float16"`` or ``"torch.float16"``) stands for; ``CheckpointError`` otherwise."""
    dtype = TORCH_DTYPES.get(name.removeprefix("torch.")) if isinstance(name, str) else None
    if dtype is None:
        raise CheckpointError(f"{source} names the dtype {name!r}, which is not a torch dtype; the file is damaged")
    return dtype
