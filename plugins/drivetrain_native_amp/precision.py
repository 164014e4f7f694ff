"""The native precisions' role objects (``run.precision``, ``PrecisionSpec(hooks=...)``):
``bf16`` autocasts, ``fp16`` autocasts and scales the loss. Cheap to import: torch is imported
by the methods that use it."""

from __future__ import annotations

from typing import Any, ContextManager, Mapping

from drivetrain.plugin_api import Precision


class NativeAutocast(Precision):
    """``torch.autocast`` on the run's device type in the chosen dtype: around each prepared
    model's ``forward`` (outputs back in fp32) and in ``accelerator.autocast()``."""

    def convert_model(self, model: Any) -> Any:
        from .amp import autocast_forward

        return autocast_forward(model, self.run, self.name)

    def autocast(self, kwargs: Mapping[str, Any]) -> ContextManager[Any]:
        from .amp import autocast_context

        return autocast_context(self.run, self.name, kwargs)


class LossScaling(NativeAutocast):
    """fp16: autocast, and the loss scaled by the run's gradient scaler in backward."""

    def make_grad_scaler(self, kwargs: Mapping[str, Any]) -> Any:
        from .amp import make_grad_scaler

        return make_grad_scaler(self.run, kwargs)

    def backward(self, loss: Any, kwargs: Mapping[str, Any]) -> None:
        scaler = self.run.grad_scaler
        if scaler is None:  # the strategy made none (its engine scales)
            super().backward(loss, kwargs)
            return
        scaler.scale(loss).backward(**kwargs)
