"""torch.autocast and GradScaler for the run's device."""

from __future__ import annotations

import functools
from typing import Any, Mapping

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def make_grad_scaler(run: Any, kwargs: Mapping[str, Any]) -> torch.amp.GradScaler:
    return torch.amp.GradScaler(run.platform.device_type, **kwargs)


def autocast_context(run: Any, precision: str, kwargs: Mapping[str, Any]) -> torch.autocast:
    return torch.autocast(device_type=run.platform.device_type, dtype=DTYPES[precision], **kwargs)


def autocast_forward(model: torch.nn.Module, run: Any, precision: str) -> torch.nn.Module:
    """Make ``model.forward`` run under autocast and return fp32 outputs.

    The original ``forward`` is kept in ``model._original_forward`` so that
    ``unwrap_model(keep_fp32_wrapper=False)`` can restore it.
    """
    if "_original_forward" in model.__dict__:
        return model  # prepared twice: already converted
    options = run.handler_kwargs.get("AutocastKwargs")
    kwargs = options.to_kwargs() if options is not None else {}
    # Resolved once here, not on every forward: a step should cost what plain torch costs.
    kwargs = {"device_type": run.platform.device_type, "dtype": DTYPES[precision], **kwargs}
    original = model.forward
    from drivetrain.plugin_api import convert_to_fp32

    @functools.wraps(original)
    def forward(*args: Any, **inner_kwargs: Any) -> Any:
        with torch.autocast(**kwargs):
            outputs = original(*args, **inner_kwargs)
        return convert_to_fp32(outputs)

    model._original_forward = original
    model.forward = forward
    return model
