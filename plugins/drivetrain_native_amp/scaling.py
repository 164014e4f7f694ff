"""The run hooks of the native ``fp16`` precision, called only while it is the run's precision
(``PrecisionSpec(hooks=...)``), so that other precisions' steps do not pay for them."""

from __future__ import annotations

from drivetrain.plugin_api import hookimpl


class LossScaling:
    """fp16's backward: the loss scaled by the run's gradient scaler."""

    @hookimpl(trylast=True)  # a strategy whose engine scales the loss itself answers first
    def drivetrain_backward(self, loss, run, kwargs):
        scaler = getattr(run, "grad_scaler", None)
        if scaler is None:
            return None
        scaler.scale(loss).backward(**kwargs)
        return True
