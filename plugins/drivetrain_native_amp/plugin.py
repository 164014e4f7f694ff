"""Native mixed precision: ``fp16`` (with a gradient scaler) and ``bf16`` through
``torch.autocast`` on the run's device type."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, PrecisionSpec, hookimpl

# API 1.3: fp16's loss scaling is the role object of its PrecisionSpec
PLUGIN_INFO = PluginInfo(api_version="1.3", description="fp16/bf16 with torch.autocast and GradScaler")


@hookimpl
def drivetrain_register_precisions():
    return [
        # the loss scaling's backward is a run hook of fp16 alone: a bf16 step never calls it
        PrecisionSpec(name="fp16", backend="native", description="float16 autocast + loss scaling",
                      hooks="drivetrain_native_amp.scaling:LossScaling"),
        PrecisionSpec(name="bf16", backend="native", description="bfloat16 autocast"),
    ]


@hookimpl
def drivetrain_make_grad_scaler(run, kwargs):
    if run.selection.mixed_precision != "fp16":
        return None
    from .amp import make_grad_scaler

    return make_grad_scaler(run, kwargs)


@hookimpl
def drivetrain_autocast(run, kwargs):
    from .amp import autocast_context

    return autocast_context(run, kwargs)


@hookimpl
def drivetrain_convert_model(model, run):
    import torch

    # A strategy whose engine runs the model in its own precision answers the run's autocast
    # first (with no autocast): forward is then left as it is.
    if not isinstance(run.call("drivetrain_autocast", kwargs={}), torch.autocast):
        return None
    from .amp import autocast_forward

    return autocast_forward(model, run)
