"""The ``bnb`` plugin: 8-bit and 4-bit quantised loading through bitsandbytes.

It contributes ``drivetrain.utils.BnbQuantizationConfig``, ``load_and_quantize_model``,
``has_4bit_bnb_layers`` and the ``is_*bnb_available`` probes. bitsandbytes is imported only
when one of them is used; without it they fail with the command that installs it.
"""

from __future__ import annotations

from drivetrain.plugin_api import EnvReportLine, PluginInfo, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="8-bit / 4-bit quantised loading (bitsandbytes)",
                         requires=("bitsandbytes>=0.45",), extra="bnb")

_NAMES = ("BnbQuantizationConfig", "load_and_quantize_model", "has_4bit_bnb_layers", "is_bnb_available",
          "is_4bit_bnb_available", "is_8bit_bnb_available", "is_bitsandbytes_multi_backend_available")


@hookimpl
def drivetrain_public_names():
    names = {f"utils.{name}": f"drivetrain_bnb.quantization:{name}" for name in _NAMES}
    # Accelerate defines these two in `accelerate.utils.bnb`
    names.update({f"utils.bnb.{name}": f"drivetrain_bnb.quantization:{name}"
                  for name in ("has_4bit_bnb_layers", "load_and_quantize_model")})
    return names


@hookimpl
def drivetrain_env_report():
    import importlib.metadata

    try:
        version = importlib.metadata.version("bitsandbytes")
    except importlib.metadata.PackageNotFoundError:
        version = "not installed (pip install 'drivetrain[bnb]')"
    return [EnvReportLine("bitsandbytes", version)]
