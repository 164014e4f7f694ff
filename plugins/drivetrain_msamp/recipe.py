"""``MSAMPRecipeKwargs``: MS-AMP's optimisation level."""

from __future__ import annotations

import os
from dataclasses import dataclass

from drivetrain.plugin_api import ConfigError, KwargsHandler

OPT_LEVELS = ("O1", "O2")


@dataclass
class MSAMPRecipeKwargs(KwargsHandler):
    """MS-AMP options; passing it selects the ``msamp`` backend.

    Attributes:
        opt_level: ``O1`` (fp8 weights and gradients, fp8 all-reduce) or ``O2`` (also fp8
            optimizer states, the default). With DeepSpeed, ``O3`` is DeepSpeed ZeRO's.
    """

    opt_level: str | None = None

    precision_backend = "msamp"

    def __post_init__(self) -> None:
        if self.opt_level is None:
            self.opt_level = os.environ.get("DRIVETRAIN_FP8_OPT_LEVEL") or os.environ.get("ACCELERATE_FP8_OPT_LEVEL") \
                or "O2"
        self.opt_level = str(self.opt_level).upper()
        if self.opt_level not in OPT_LEVELS:
            raise ConfigError(f"MS-AMP opt_level must be O1 or O2, got {self.opt_level!r}")
