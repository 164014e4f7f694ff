"""What ``Accelerator.prepare()`` recorded, in the order it prepared it.

Each ``Accelerator``'s :class:`~drivetrain.runtime.session.Session` holds one
:class:`PreparedObjects`; checkpointing saves and restores exactly these objects, the step
path reads the models and optimizers, and a plugin that needs them (a strategy sizing its
engine from the prepared data loaders) gets them through ``prepared_objects(accelerator)``
(``drivetrain.plugin_api``) instead of the facade's attributes.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["PreparedObjects"]


def _hooks() -> dict[int, Callable[..., None]]:
    # an OrderedDict: torch's RemovableHandle, which removes a pre-hook again, keeps a weak reference to it
    return collections.OrderedDict()


@dataclass(eq=False)
class PreparedObjects:
    """The objects one accelerator prepared or registered, each list in preparation order.

    ``custom_objects`` are those given to ``register_for_checkpointing``; the pre-hooks are
    those of ``register_save_state_pre_hook`` / ``register_load_state_pre_hook``, by handle id.
    """

    models: list[Any] = field(default_factory=list)
    optimizers: list[Any] = field(default_factory=list)
    schedulers: list[Any] = field(default_factory=list)
    dataloaders: list[Any] = field(default_factory=list)
    custom_objects: list[Any] = field(default_factory=list)
    save_state_pre_hooks: dict[int, Callable[..., None]] = field(default_factory=_hooks)
    load_state_pre_hooks: dict[int, Callable[..., None]] = field(default_factory=_hooks)

    def forget_prepared(self) -> None:
        """Drop the models, optimizers, schedulers and data loaders (``free_memory``); the
        registered objects and pre-hooks stay."""
        self.models, self.optimizers, self.schedulers, self.dataloaders = [], [], [], []

    def counts(self) -> dict[str, int]:
        """How many of each kind, as a checkpoint's manifest records them."""
        return {"models": len(self.models), "optimizers": len(self.optimizers), "schedulers": len(self.schedulers),
                "dataloaders": len(self.dataloaders), "custom": len(self.custom_objects)}

