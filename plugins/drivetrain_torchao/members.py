"""The ``Accelerator`` members of an fp8 run (``accelerator.fp8_backend``, ...), answered by the
active fp8 precision plugin through ``drivetrain_configure_run``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class FP8Members:
    """Accelerate's fp8 attributes of an ``Accelerator``.

    Attributes:
        fp8_backend: ``"AO"``, ``"TE"`` or ``"MSAMP"``.
        recipe: the recipe handler the user passed, or the default one built for the run.
        given: whether the user passed a recipe handler.
    """

    fp8_backend: str
    recipe: Any
    given: bool
    delayed_fp8_autocast: bool = False

    fp8_enabled = True

    @property
    def has_fp8_handler(self) -> bool:
        return self.given

    @property
    def fp8_recipe_handler(self) -> Any:
        return self.recipe if self.fp8_backend in ("TE", "MSAMP") else None

    @property
    def te_recipe_handler(self) -> Any:
        return self.recipe if self.fp8_backend == "TE" else None

    @property
    def msamp_recipe_handler(self) -> Any:
        return self.recipe if self.fp8_backend == "MSAMP" else None

    @property
    def ao_recipe_handler(self) -> Any:
        return self.recipe if self.fp8_backend == "AO" else None
