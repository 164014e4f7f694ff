"""The training step of an ``Accelerator``: backward, the gradient-accumulation window,
unscaling and clipping gradients, LOMO's fused backward (unwrapping a prepared model is
:func:`drivetrain.services.other.unwrap_prepared_model`, which checkpointing uses too).

Each function takes the accelerator whose run's plugins act (passed in, never imported:
this module sits below the facade); where no plugin answers, plain torch does the work.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from ..kernel.errors import ConfigError


def backward(accelerator: Any, loss: torch.Tensor, kwargs: dict[str, Any]) -> None:
    """Backward for ``loss``, divided for gradient accumulation unless the strategy accumulates."""
    steps = accelerator.gradient_accumulation_steps
    strategy = accelerator.run.strategy
    if steps > 1 and not strategy.accumulates_gradients:
        loss = loss / steps
    strategy.backward(loss, kwargs, accelerator._prepared.models)


def count_micro_batch(accelerator: Any) -> None:
    """Decide whether this step synchronises gradients (end of window or of data)."""
    gradient_state = accelerator.gradient_state
    if gradient_state.sync_with_dataloader and gradient_state.end_of_dataloader:
        accelerator.step = 0
        gradient_state._set_sync_gradients(True)
    else:
        accelerator.step += 1
        gradient_state._set_sync_gradients((accelerator.step % gradient_state.num_steps) == 0)


@contextlib.contextmanager
def accumulate(accelerator: Any, models: tuple[torch.nn.Module, ...]) -> Iterator[None]:
    """One micro-batch of the window: outside its last one, the models skip synchronising."""
    count_micro_batch(accelerator)
    if accelerator.sync_gradients or accelerator.gradient_state.sync_each_batch or not models:
        yield  # the common step: nothing to enter
        return
    with contextlib.ExitStack() as stack:
        for model in models:
            stack.enter_context(accelerator.no_sync(model))
        yield


def unscale_gradients(accelerator: Any, optimizer: Any = None) -> None:
    """Divide fp16 gradients by the loss scale, once per step, for the given optimizer(s) or all."""
    if accelerator.scaler is None:
        return
    optimizers = [optimizer] if optimizer is not None and not isinstance(optimizer, (list, tuple)) else (
        optimizer or accelerator._prepared.optimizers)
    for opt in optimizers:
        try:
            accelerator.scaler.unscale_(getattr(opt, "optimizer", opt))
        except RuntimeError as error:  # already unscaled in this step: nothing left to do
            if "already been called" not in str(error):
                raise


def _parameter_list(parameters: Any) -> list[Any]:
    return list(parameters) if not isinstance(parameters, torch.Tensor) else [parameters]


def clip_grad_norm(accelerator: Any, parameters: Any, max_norm: float, norm_type: float) -> torch.Tensor | None:
    """Clip the gradient norm after unscaling, through the strategy or torch; the total norm."""
    parameters = _parameter_list(parameters)
    accelerator.unscale_gradients()
    norm = accelerator.run.strategy.clip_grad_norm(parameters, max_norm, norm_type)
    if norm is None:
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)
    return None if norm is False else norm  # False: the strategy clipped but measured no norm


def clip_grad_value(accelerator: Any, parameters: Any, clip_value: float) -> None:
    """Clip each gradient after unscaling, unless the strategy clipped (or refused) itself."""
    parameters = _parameter_list(parameters)
    if accelerator.run.strategy.clip_grad_value(parameters, clip_value):
        return
    accelerator.unscale_gradients()
    torch.nn.utils.clip_grad_value_(parameters, clip_value)


def lomo_optimizers(optimizers: list[Any]) -> list[Any]:
    """The prepared optimizers that are LOMO ones (their step happens inside backward)."""
    from ..services.availability import is_lomo_available

    if not is_lomo_available():
        return []
    from lomo_optim import AdaLomo, Lomo

    return [opt for opt in optimizers if isinstance(getattr(opt, "optimizer", opt), (Lomo, AdaLomo))]


def lomo_backward(optimizers: list[Any], loss: Any, learning_rate: float) -> None:
    """Backward and update in one pass, through each prepared LOMO optimizer's ``fused_backward``."""
    lomo = lomo_optimizers(optimizers)
    if not lomo:
        raise ConfigError("lomo_backward needs a prepared Lomo or AdaLomo optimizer (pip install lomo-optim)")
    for optimizer in lomo:
        getattr(optimizer, "optimizer", optimizer).fused_backward(loss, learning_rate)
