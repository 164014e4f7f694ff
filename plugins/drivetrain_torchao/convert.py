"""Swap a model's linear layers for torchao's ``Float8Linear`` before the parallel wrapper."""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable

import torch

logger = logging.getLogger(__name__)


def _linear_names(model: torch.nn.Module) -> list[str]:
    return [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]


def filter_linear_layers(module: torch.nn.Module, fqn: str, layers_to_filter: list[str]) -> bool:
    """Whether ``module`` (named ``fqn``) should become a ``Float8Linear``.

    Linear layers whose sizes are not multiples of 16 are kept (float8 matmuls need them),
    and so are the layers named in ``layers_to_filter``.
    """
    if isinstance(module, torch.nn.Linear):
        if module.in_features % 16 != 0 or module.out_features % 16 != 0:
            return False
    return fqn not in layers_to_filter


def filter_first_and_last_linear_layers(model: torch.nn.Module) -> Callable[[torch.nn.Module, str], bool]:
    """A ``module_filter_fn`` that keeps the first and the last linear layer in high precision.

    The first and last layers of a network are the most sensitive to float8's range (as in
    torchao's own recipes); every other eligible linear layer is converted.
    """
    names = _linear_names(model)
    keep = [names[0], names[-1]] if names else []

    def module_filter_fn(module: torch.nn.Module, fqn: str) -> bool:
        return filter_linear_layers(module, fqn, keep)

    return module_filter_fn


def has_ao_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` already holds torchao float8 layers."""
    try:
        from torchao.float8.float8_linear import Float8Linear
    except ImportError:
        return False
    return any(isinstance(module, Float8Linear) for module in model.modules())


def convert_model_to_fp8_ao(model: torch.nn.Module, config: Any = None,
                            module_filter_fn: Callable[[torch.nn.Module, str], bool] | None = None) -> torch.nn.Module:
    """Convert ``model``'s linear layers to ``Float8Linear`` in place, and return it.

    Args:
        model: the module (on any device, the meta device included).
        config: a ``torchao.float8.Float8LinearConfig``; ``None`` for torchao's default.
        module_filter_fn: which layers to convert; ``None`` for
            :func:`filter_first_and_last_linear_layers`.
    """
    from torchao.float8 import convert_to_float8_training

    if module_filter_fn is None:
        module_filter_fn = filter_first_and_last_linear_layers(model)
    converted = convert_to_float8_training(model, config=config, module_filter_fn=module_filter_fn)
    count = sum(type(m).__name__ == "Float8Linear" for m in converted.modules())
    logger.debug("torchao: %d linear layers converted to float8", count)
    return converted


def warn_nothing_converted(model: torch.nn.Module, custom_filter: bool) -> None:
    """Say that fp8 was asked for and ``model`` will train in full precision: no layer qualified."""
    rule = ("the module_filter_fn of AORecipeKwargs kept every layer" if custom_filter else
            "torchao converts linear layers whose sizes are multiples of 16, except the first and the last")
    warnings.warn(f"mixed_precision='fp8' converted none of {type(model).__name__}'s {len(_linear_names(model))} "
                  f"linear layer(s) ({rule}), so it trains in full precision: choose the layers with "
                  "AORecipeKwargs(module_filter_fn=...), or use mixed_precision='bf16'", UserWarning, stacklevel=2)
