"""Local SGD: processes step on their own and average their parameters every few steps."""

from __future__ import annotations

from typing import Any

import torch

from ..kernel.errors import ConfigError


class LocalSGD:
    """Context manager for Local SGD.

    Inside it, gradients are not synchronised; every ``local_sgd_steps`` calls to
    :meth:`step` the model parameters are averaged across processes (and once more on
    exit). With one process, or ``enabled=False``, it does nothing.

    Args:
        accelerator: the ``Accelerator`` that prepared ``model``.
        model: the prepared model.
        local_sgd_steps: optimizer steps between two averages.
        enabled: switch it off without changing the loop.
    """

    def __init__(self, accelerator: Any, model: torch.nn.Module, local_sgd_steps: int, enabled: bool = True) -> None:
        if local_sgd_steps < 1:
            raise ConfigError(f"local_sgd_steps must be at least 1, got {local_sgd_steps}")
        self.accelerator = accelerator
        self.model = model
        self.local_sgd_steps = local_sgd_steps
        self.enabled = enabled and accelerator.num_processes > 1
        self.num_steps = 0
        self._no_sync = None

    def __enter__(self) -> "LocalSGD":
        if self.enabled:
            self._no_sync = self.accelerator.no_sync(self.model)
            self._no_sync.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.enabled:
            self._sync_and_average()
            self._no_sync.__exit__(*exc_info)

    def step(self) -> None:
        """Call after each optimizer step."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._sync_and_average()

    def _sync_and_average(self) -> None:
        collectives = self.accelerator.state.collectives
        self.accelerator.wait_for_everyone()
        with torch.no_grad():
            for parameter in self.accelerator.unwrap_model(self.model).parameters():
                collectives.all_reduce(parameter.data, "mean")
