"""Floating-point inputs reach a DeepSpeed engine in the dtype its model runs in.

With ``fp16`` or ``bf16`` enabled, DeepSpeed converts the model's weights to that dtype and
does not autocast: a batch of float32 features then fails in the first layer (``mat1 and
mat2 must have the same dtype``). The engine gets a forward pre-hook that casts every
floating-point tensor of its arguments (nested lists, tuples and dicts included) to the
model's dtype; integer tensors (token ids, labels) and everything else pass unchanged. An
engine configured with DeepSpeed's own ``torch_autocast`` block keeps float32 weights and
autocasts itself, so it gets no hook.
"""

from __future__ import annotations

from typing import Any

import torch


def engine_input_dtype(engine: Any) -> torch.dtype | None:
    """The dtype an engine's model computes in when it is not float32, else ``None``."""
    autocasts = getattr(engine, "torch_autocast_enabled", None)
    if callable(autocasts) and autocasts():
        return None
    if engine.bfloat16_enabled():
        return torch.bfloat16
    if engine.fp16_enabled():
        return torch.float16
    return None


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if isinstance(value, dict):
        return type(value)((key, _cast(item, dtype)) for key, item in value.items())
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(_cast(item, dtype) for item in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(item, dtype) for item in value)
    return value


def cast_inputs_to_engine_dtype(engine: torch.nn.Module) -> Any:
    """Install the cast on ``engine`` (once); returns the hook handle, or ``None`` when not needed."""
    dtype = engine_input_dtype(engine)
    if dtype is None or getattr(engine, "_drivetrain_input_cast", None) is not None:
        return None

    def cast(_module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return _cast(args, dtype), _cast(kwargs, dtype)

    engine._drivetrain_input_cast = engine.register_forward_pre_hook(cast, with_kwargs=True)
    return engine._drivetrain_input_cast
