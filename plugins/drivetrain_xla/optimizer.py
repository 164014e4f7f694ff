"""``xm.optimizer_step`` semantics for a prepared optimizer: gradients are averaged across the
replicas, then the step runs, then the lazy graph is cut so it never grows across steps.

``GradientState.is_xla_gradients_synced`` says whether this step's gradients were already
averaged (``clip_grad_norm_`` averages them first, so the norm is the global one); the step
then does not average them twice, and clears the flag.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch_xla.core.xla_model as xm

from drivetrain.plugin_api import AcceleratedOptimizer, GradientState

from .platform import sync

FLAG = "is_xla_gradients_synced"


def gradients_synced() -> bool:
    return bool(GradientState._shared_state.get(FLAG, False))


def set_gradients_synced(value: bool) -> None:
    GradientState._shared_state[FLAG] = value


def reduce_gradients(optimizer: torch.optim.Optimizer) -> None:
    """Average this step's gradients across the replicas, once."""
    if not gradients_synced():
        xm.reduce_gradients(optimizer)
        set_gradients_synced(True)


class XlaOptimizer(AcceleratedOptimizer):
    """The optimizer wrapper of an XLA run: the base's step (no scaler: bf16 needs none),
    between averaging the gradients and cutting the graph."""

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if not self.gradient_state.sync_gradients:
            return None  # accumulating: nothing to average before the window's last step
        reduce_gradients(self.optimizer)
        result = super().step(closure)
        set_gradients_synced(False)
        sync()
        return result


def clip_grad_norm(parameters: Any, max_norm: float, norm_type: float) -> torch.Tensor:
    """Clip by the global gradient norm: the gradients are averaged across the replicas first
    (the step that follows does not average them again)."""
    import torch_xla.runtime as xr

    parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    count = xr.world_size()
    if not gradients_synced() and count > 1:
        gradients = [p.grad for p in parameters if p.grad is not None]
        if gradients:
            xm.all_reduce(xm.REDUCE_SUM, gradients, scale=1.0 / count)
    set_gradients_synced(True)
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)
