"""``ipex.optimize`` on the models and optimizers of one ``prepare`` call (imports IPEX)."""

from __future__ import annotations

import logging
from typing import Any, Sequence

import intel_extension_for_pytorch as ipex
import torch

logger = logging.getLogger(__name__)

#: Set on a model IPEX optimised, so a model prepared again is not optimised twice.
MARK = "_drivetrain_ipex_optimized"


def bf16_prepack_supported() -> bool:
    """Whether the CPU has the instructions IPEX's bf16 weight prepacking needs (AVX-512 BW/VL/DQ
    or AVX-NE-CONVERT). Without them IPEX still trains in bf16, with plain weight layouts."""
    check = getattr(getattr(ipex, "_C", None), "onednn_has_bf16_support", None)
    return bool(check()) if check is not None else True


def _owner(optimizer: torch.optim.Optimizer, models: list[torch.nn.Module]) -> torch.nn.Module | None:
    """The model whose parameters ``optimizer`` updates (the first parameter decides)."""
    first = next((p for group in optimizer.param_groups for p in group["params"]), None)
    for model in models:
        if first is not None and any(first is p for p in model.parameters()):
            return model
    return None


def optimize_objects(objects: Sequence[Any], dtype: torch.dtype | None, device: torch.device,
                     level: str = "O1", place: bool = True) -> list[Any] | None:
    """Run ``ipex.optimize`` on each model of ``objects`` with the optimizer that updates it.

    A model in training mode is optimised with its optimizer (fused updates, bf16 weights with
    fp32 master copies when ``dtype`` is bfloat16); one in evaluation mode without an
    optimizer is optimised for inference; a training model with no optimizer in the call is
    left alone (IPEX needs the optimizer to train). With ``place``, models go to ``device`` first
    when it is not the CPU (IPEX optimises an XPU model on the XPU); without it (the user's
    ``device_placement=False``) each is optimised where the user left it. Returns ``None`` when
    nothing changed.
    """
    result = list(objects)
    models = [o for o in result if isinstance(o, torch.nn.Module) and not getattr(o, MARK, False)]
    if not models:
        return None
    optimizers = [o for o in result if isinstance(o, torch.optim.Optimizer)]
    pairs = {id(model): None for model in models}
    for optimizer in optimizers:
        owner = _owner(optimizer, models)
        if owner is not None and pairs[id(owner)] is None:
            pairs[id(owner)] = optimizer
    extra: dict[str, Any] = {}
    if dtype == torch.bfloat16 and device.type == "cpu" and not bf16_prepack_supported():
        logger.info("this CPU lacks AVX-512/AVX-NE-CONVERT: IPEX trains bf16 without weight prepacking")
        extra["weights_prepack"] = False
    changed = False
    for model in models:
        optimizer = pairs[id(model)]
        if model.training and optimizer is None:
            logger.debug("IPEX leaves %s alone: it trains and no optimizer of it is in this prepare call",
                         type(model).__name__)
            continue
        if place and device.type != "cpu":
            model.to(device)
        new_model, new_optimizer = _optimize(model, optimizer, dtype, level, extra)
        setattr(new_model, MARK, True)
        for index, obj in enumerate(result):
            if obj is model:
                result[index] = new_model
            elif optimizer is not None and obj is optimizer:
                result[index] = new_optimizer
        changed = True
    return result if changed else None


def _optimize(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, dtype: torch.dtype | None,
              level: str, extra: dict[str, Any]) -> tuple[torch.nn.Module, torch.optim.Optimizer | None]:
    if optimizer is None:
        return ipex.optimize(model, dtype=dtype, inplace=True, level=level, **extra), None
    return ipex.optimize(model, optimizer=optimizer, dtype=dtype, inplace=True, level=level, **extra)
