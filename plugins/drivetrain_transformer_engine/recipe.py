"""``TERecipeKwargs`` (and Accelerate's older ``FP8RecipeKwargs``): Transformer Engine's fp8 recipe."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from drivetrain.plugin_api import ConfigError, KwargsHandler

FORMATS = ("HYBRID", "E4M3", "E5M2")
AMAX_ALGORITHMS = ("max", "most_recent")


def _variable(name: str) -> str | None:
    for prefix in ("DRIVETRAIN_", "ACCELERATE_"):
        value = os.environ.get(prefix + name)
        if value is not None:
            return value
    return None


def _flag(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


def parse_override(text: str) -> tuple[bool, bool, bool]:
    """``"false,false,true"`` or ``"(False, False, True)"``: fprop, dgrad, wgrad in high precision."""
    parts = [p for p in text.strip().strip("()[]").replace(" ", "").split(",") if p]
    if len(parts) != 3:
        raise ConfigError(f"fp8 override_linear_precision takes three booleans (fprop,dgrad,wgrad), got {text!r}")
    return tuple(_flag(p) for p in parts)  # type: ignore[return-value]


@dataclass
class TERecipeKwargs(KwargsHandler):
    """Transformer Engine's delayed-scaling fp8 recipe; passing it selects the ``te`` backend.

    Fields left ``None`` come from the ``FP8_*`` launch variables, else TE's defaults.

    Attributes:
        use_autocast_during_eval: run ``fp8_autocast`` in eval mode too (off: evaluation in
            high precision, which usually scores better).
        margin: the scaling factor's margin (powers of two).
        interval: steps between scaling-factor updates (TE < 2 only).
        fp8_format: ``HYBRID`` (E4M3 forward, E5M2 backward), ``E4M3`` or ``E5M2``.
        amax_history_len: length of the amax history window.
        amax_compute_algo: ``max`` or ``most_recent`` over the window.
        override_linear_precision: (fprop, dgrad, wgrad) computed in high precision.
        use_mxfp8_block_scaling: Blackwell's MXFP8 block scaling instead of delayed scaling.
    """

    use_autocast_during_eval: bool | None = None
    margin: int | None = None
    interval: int | None = None
    fp8_format: str | None = None
    amax_history_len: int | None = None
    amax_compute_algo: str | None = None
    override_linear_precision: tuple[bool, bool, bool] | None = None
    use_mxfp8_block_scaling: bool | None = None

    precision_backend = "te"

    def __post_init__(self) -> None:
        def fill(field: str, variable: str, convert: Any, default: Any) -> None:
            if getattr(self, field) is None:
                text = _variable(variable)
                setattr(self, field, convert(text) if text is not None else default)

        fill("use_autocast_during_eval", "FP8_USE_AUTOCAST_DURING_EVAL", _flag, False)
        fill("margin", "FP8_MARGIN", int, 0)
        fill("interval", "FP8_INTERVAL", int, 1)
        fill("fp8_format", "FP8_FORMAT", str, "HYBRID")
        fill("amax_history_len", "FP8_AMAX_HISTORY_LEN", int, 1024)
        fill("amax_compute_algo", "FP8_AMAX_COMPUTE_ALGO", str, "most_recent")
        fill("override_linear_precision", "FP8_OVERRIDE_LINEAR_PRECISION", parse_override, (False, False, False))
        fill("use_mxfp8_block_scaling", "FP8_USE_MXFP8_BLOCK_SCALING", _flag, False)
        self.fp8_format = str(self.fp8_format).upper()
        if self.fp8_format not in FORMATS:
            raise ConfigError(f"fp8_format must be one of {', '.join(FORMATS)}, got {self.fp8_format!r}")
        self.amax_compute_algo = str(self.amax_compute_algo).lower()
        if self.amax_compute_algo not in AMAX_ALGORITHMS:
            raise ConfigError(f"amax_compute_algo must be one of {', '.join(AMAX_ALGORITHMS)}, "
                              f"got {self.amax_compute_algo!r}")

    def te_recipe(self) -> Any:
        """The ``transformer_engine.common.recipe`` object this handler describes."""
        import inspect

        from transformer_engine.common import recipe

        if self.use_mxfp8_block_scaling:
            return recipe.MXFP8BlockScaling(fp8_format=getattr(recipe.Format, self.fp8_format))
        options = {"margin": self.margin, "fp8_format": getattr(recipe.Format, self.fp8_format),
                   "amax_history_len": self.amax_history_len, "amax_compute_algo": self.amax_compute_algo,
                   "override_linear_precision": tuple(self.override_linear_precision), "interval": self.interval}
        accepted = inspect.signature(recipe.DelayedScaling).parameters
        return recipe.DelayedScaling(**{k: v for k, v in options.items() if k in accepted})


@dataclass
class FP8RecipeKwargs(TERecipeKwargs):
    """Accelerate's older name for the fp8 recipe; ``backend="MSAMP"`` is refused here (use
    ``MSAMPRecipeKwargs``), ``"TE"`` is ``TERecipeKwargs``."""

    backend: str = "TE"
    opt_level: str | None = None

    def __post_init__(self) -> None:
        if str(self.backend).upper() != "TE":
            raise ConfigError(f"FP8RecipeKwargs(backend={self.backend!r}): use MSAMPRecipeKwargs for MS-AMP "
                              "and AORecipeKwargs for torchao")
        super().__post_init__()
