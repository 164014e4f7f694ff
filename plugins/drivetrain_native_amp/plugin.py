"""Native mixed precision: ``fp16`` (with a gradient scaler) and ``bf16`` through
``torch.autocast`` on the run's device type. What each does at a step is its role object
(``precision.py``), which the run's strategy owns or replaces (``Strategy.own_precision``)."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, PrecisionSpec, hookimpl

# API 2.0: each precision is a role object (run.precision), called directly on the step
PLUGIN_INFO = PluginInfo(api_version="2.0", description="fp16/bf16 with torch.autocast and GradScaler")


@hookimpl
def drivetrain_register_precisions():
    return [
        PrecisionSpec(name="fp16", backend="native", description="float16 autocast + loss scaling",
                      hooks="drivetrain_native_amp.precision:LossScaling"),
        PrecisionSpec(name="bf16", backend="native", description="bfloat16 autocast",
                      hooks="drivetrain_native_amp.precision:NativeAutocast"),
    ]
