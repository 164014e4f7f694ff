"""``AORecipeKwargs``: how torchao converts a model to float8 training."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from drivetrain.plugin_api import KwargsHandler

from .capability import environment_flag


@dataclass
class AORecipeKwargs(KwargsHandler):
    """Options of torchao's float8 training (``mixed_precision="fp8"`` with the ``ao`` backend).

    Passing it to ``Accelerator(kwargs_handlers=[...])`` selects this backend.

    Attributes:
        config: a ``torchao.float8.Float8LinearConfig``; ``None`` builds one from the fields below
            (and the ``FP8_*`` launch variables).
        module_filter_fn: ``fn(module, fully_qualified_name) -> bool`` choosing the linear layers to
            convert; ``None`` converts every eligible one except the first and the last
            (:func:`drivetrain_torchao.convert.filter_first_and_last_linear_layers`).
        enable_fsdp_float8_all_gather: FSDP2 gathers weights in float8 (half the traffic).
        pad_inner_dim: pad inner dimensions to multiples of 16 (layers whose sizes are not).
    """

    config: Any = None
    module_filter_fn: Callable[..., bool] | None = None
    enable_fsdp_float8_all_gather: bool | None = None
    pad_inner_dim: bool | None = None

    #: the ``PrecisionSpec.backend`` this handler configures (read by the ``Accelerator``)
    precision_backend = "ao"

    def __post_init__(self) -> None:
        if self.enable_fsdp_float8_all_gather is None:
            self.enable_fsdp_float8_all_gather = environment_flag("FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER", True)
        if self.pad_inner_dim is None:
            self.pad_inner_dim = environment_flag("FP8_PAD_INNER_DIM", True)

    def float8_config(self) -> Any:
        """The ``Float8LinearConfig`` to convert with."""
        if self.config is not None:
            return self.config
        from torchao.float8 import Float8LinearConfig

        return Float8LinearConfig(enable_fsdp_float8_all_gather=bool(self.enable_fsdp_float8_all_gather),
                                  pad_inner_dim=bool(self.pad_inner_dim))
