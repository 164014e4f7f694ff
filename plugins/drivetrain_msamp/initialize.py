"""``msamp.initialize`` on a model and its optimizer."""

from __future__ import annotations

from typing import Any

import torch

from drivetrain.plugin_api import ConfigError


def initialize(model: torch.nn.Module, optimizer: torch.optim.Optimizer, opt_level: str) -> tuple[Any, Any]:
    """Cast ``model``'s linear layers to MS-AMP's fp8 ones and wrap ``optimizer`` (``LBAdam``...)."""
    try:
        import msamp  # type: ignore[import-not-found]
    except ImportError:
        raise ConfigError("MS-AMP is not installed (it is not on the package index: install it from its source "
                          "tree, github.com/Azure/MS-AMP), or choose --fp8-backend ao") from None
    return msamp.initialize(model, optimizer, opt_level=opt_level)
