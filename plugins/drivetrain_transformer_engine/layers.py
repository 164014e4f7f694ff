"""Transformer Engine layers swapped in, and ``fp8_autocast`` around forward."""

from __future__ import annotations

import functools
import importlib.util
from typing import Any, Callable

import torch


def is_transformer_engine_available() -> bool:
    return importlib.util.find_spec("transformer_engine") is not None


def is_transformer_engine_mxfp8_available() -> bool:
    """Whether TE is installed and this GPU runs MXFP8 block scaling (Blackwell)."""
    if not is_transformer_engine_available():
        return False
    try:
        from transformer_engine.pytorch.fp8 import check_mxfp8_support
    except ImportError:
        return False
    return bool(check_mxfp8_support()[0])


def has_transformer_engine_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds Transformer Engine layers."""
    if not is_transformer_engine_available():
        return False
    import transformer_engine.pytorch as te

    kinds = tuple(getattr(te, name) for name in ("LayerNorm", "Linear", "TransformerLayer", "LayerNormLinear",
                                                  "LayerNormMLP", "RMSNorm") if hasattr(te, name))
    return any(isinstance(module, kinds) for module in model.modules())


def convert_model(model: torch.nn.Module, to_transformer_engine: bool = True, _convert_linear: bool = True,
                  _convert_ln: bool = True) -> None:
    """Swap ``nn.Linear``/``nn.LayerNorm`` for their TE versions in place (or back), keeping weights.

    Linear layers whose sizes are not multiples of 16 stay as they are: fp8 GEMMs need them.
    """
    import transformer_engine.pytorch as te

    for name, child in list(model.named_children()):
        replacement = None
        if to_transformer_engine:
            if _convert_linear and type(child) is torch.nn.Linear and \
                    child.in_features % 16 == 0 and child.out_features % 16 == 0:
                replacement = te.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                                        params_dtype=child.weight.dtype)
            elif _convert_ln and type(child) is torch.nn.LayerNorm and child.elementwise_affine:
                replacement = te.LayerNorm(child.normalized_shape[0], eps=child.eps, params_dtype=child.weight.dtype)
        else:
            if _convert_linear and isinstance(child, te.Linear):
                replacement = torch.nn.Linear(child.in_features, child.out_features,
                                              bias=getattr(child, "bias", None) is not None,
                                              dtype=child.weight.dtype)
            elif _convert_ln and isinstance(child, te.LayerNorm):
                replacement = torch.nn.LayerNorm(child.weight.shape[0], eps=child.eps, dtype=child.weight.dtype)
        if replacement is None:
            convert_model(child, to_transformer_engine, _convert_linear, _convert_ln)
            continue
        with torch.no_grad():
            replacement.to(child.weight.device)
            replacement.weight.copy_(child.weight)
            if getattr(child, "bias", None) is not None and getattr(replacement, "bias", None) is not None:
                replacement.bias.copy_(child.bias)
        setattr(model, name, replacement)


def contextual_fp8_autocast(model_forward: Callable, fp8_recipe: Any, use_during_eval: bool = False) -> Callable:
    """Wrap ``model_forward`` in ``fp8_autocast`` with ``fp8_recipe`` while training (and in eval
    when ``use_during_eval``)."""
    import transformer_engine.pytorch as te

    module = getattr(model_forward, "__self__", None)

    @functools.wraps(model_forward)
    def forward(*args: Any, **kwargs: Any) -> Any:
        enabled = use_during_eval or module is None or module.training
        with te.fp8_autocast(enabled=enabled, fp8_recipe=fp8_recipe):
            return model_forward(*args, **kwargs)

    forward.__wrapped_fp8__ = True  # type: ignore[attr-defined]
    return forward


def apply_fp8_autowrap(model: torch.nn.Module, fp8_recipe_handler: Any) -> torch.nn.Module:
    """Make ``model.forward`` run under ``fp8_autocast`` with the handler's recipe (once)."""
    from .recipe import TERecipeKwargs

    handler = fp8_recipe_handler or TERecipeKwargs()
    if getattr(model.forward, "__wrapped_fp8__", False):
        return model
    model._original_forward = model.forward
    model.forward = contextual_fp8_autocast(model.forward, handler.te_recipe(), handler.use_autocast_during_eval)
    return model
