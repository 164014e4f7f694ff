"""Compiles prepared models with ``torch.compile`` when the user asks for a dynamo backend."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, hookimpl

PLUGIN_INFO = PluginInfo(api_version="1.0", description="torch.compile of prepared models (dynamo_backend)",
                         features=("compile",))


@hookimpl(trylast=True)
def drivetrain_finalize_model(model, run):
    options = run.options.get("dynamo_plugin")
    if options is None or options.backend in ("no", "none") or options.disable:
        return None
    from .compile import compile_model

    return compile_model(model, options)
