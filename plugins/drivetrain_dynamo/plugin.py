"""Compiles prepared models with ``torch.compile`` when the user asks for a dynamo backend."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, hookimpl

# API 1.2: asks drivetrain_compile_model first, so a strategy's wrapper compiles its own way.
PLUGIN_INFO = PluginInfo(api_version="2.0", description="torch.compile of prepared models (dynamo_backend)",
                         features=("compile",))


@hookimpl(trylast=True)
def drivetrain_finalize_model(model, run):
    options = run.compile_options
    if options is None or options.backend in ("no", "none") or options.disable:
        return None
    # A wrapper that owns forward and backward (an engine) is compiled through itself.
    compiled = run.call("drivetrain_compile_model", model=model, options=options)
    if compiled is not None:
        return compiled
    from .compile import compile_model

    return compile_model(model, options)
