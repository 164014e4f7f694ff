"""The ``ipex`` plugin: Intel Extension for PyTorch optimises the model and optimizer of a CPU
or XPU run at ``prepare`` (``ipex.optimize``: fused optimizer steps, bf16 weights with fp32
master copies under ``mixed_precision="bf16"``).

It is no role of the run but a feature (``ipex``), switched on as in Accelerate: ``--ipex`` on
``drivetrain launch``, ``ipex_config: {ipex: true}`` in the config file, or
``DRIVETRAIN_USE_IPEX=1`` / ``ACCELERATE_USE_IPEX=1``. It rewrites the objects of each
``prepare`` call before the strategy sees them (``drivetrain_transform_objects``), so DDP and
the CPU or XPU platform compose with it unchanged.
"""

from __future__ import annotations

import argparse
import importlib.util

from drivetrain.plugin_api import (
    BackendAttribute,
    ConfigField,
    ConfigSection,
    EnvReportLine,
    IncompatibleChoiceError,
    PluginInfo,
    hookimpl,
)

PLUGIN_INFO = PluginInfo(api_version="2.0", description="Intel Extension for PyTorch: ipex.optimize at prepare (CPU, XPU)",
                         requires=("intel-extension-for-pytorch>=2.3",), extra="ipex", features=("ipex",))

#: Platforms IPEX optimises for.
PLATFORMS = ("cpu", "xpu")
#: The variable that switches the feature on in launched processes (Accelerate's name is read too).
VARIABLE = "DRIVETRAIN_USE_IPEX"


class IpexRun:
    """What the run exposes while IPEX is on (``accelerator.state.use_ipex``)."""

    use_ipex = True


#: ``state.use_ipex`` of a run without IPEX.
NOT_IN_USE = False


@hookimpl
def drivetrain_configure_run(run, accelerator):
    platform = run.selection.platform.name
    if platform not in PLATFORMS:
        raise IncompatibleChoiceError(f"IPEX optimises CPU and XPU runs, not platform {platform!r}: run with --cpu, "
                                      f"or unset {VARIABLE} (and ipex_config.ipex)")
    return IpexRun()


@hookimpl
def drivetrain_transform_objects(objects, run, accelerator):
    import torch

    from .optimize import optimize_objects

    dtype = torch.bfloat16 if run.selection.mixed_precision == "bf16" else None
    # the Accelerator's setting; a per-call ``prepare(device_placement=[...])`` does not reach this hook
    return optimize_objects(objects, dtype, run.state.device, place=bool(accelerator.device_placement))


@hookimpl
def drivetrain_register_config_sections():
    return [
        ConfigSection(
            key="ipex_config",
            fields=(
                ConfigField("ipex", bool, False, ask=True,
                            help="optimise the model and optimizer with Intel Extension for PyTorch (CPU, XPU)"),
                # Accelerate's IPEX-on-XPU flag; the xpu platform is detected, or chosen with
                # --platform xpu / --use-xpu, so the key is only accepted.
                ConfigField("use_xpu", bool, False, help="Accelerate's flag for IPEX on XPU (use --platform xpu)"),
            ),
            description="Intel Extension for PyTorch (Accelerate's ipex_config)",
        )
    ]


@hookimpl
def drivetrain_add_launch_arguments(parser):
    group = parser.add_argument_group("IPEX", "Intel Extension for PyTorch (plugin ipex)")
    group.add_argument("--ipex", action="store_true", default=None,
                       help="optimise the model and optimizer with IPEX at prepare (CPU or XPU)")


@hookimpl
def drivetrain_launch_environment(args):
    if getattr(args, "ipex", None):
        return {VARIABLE: "1"}
    return None


@hookimpl
def drivetrain_env_report():
    if importlib.util.find_spec("intel_extension_for_pytorch") is None:
        return [EnvReportLine("IPEX", "not installed")]
    from importlib import metadata

    return [EnvReportLine("IPEX", metadata.version("intel-extension-for-pytorch"))]


@hookimpl
def drivetrain_public_names():
    return {"utils.is_ipex_available": "drivetrain_ipex.plugin:is_ipex_available"}


@hookimpl
def drivetrain_register_backend_attributes():
    return [BackendAttribute(owner="AcceleratorState", name="use_ipex", unused=NOT_IN_USE,
                             description="whether IPEX optimises this run's objects")]


def is_ipex_available() -> bool:
    """Whether Intel Extension for PyTorch is installed and built for this torch's minor version
    (IPEX refuses to load with another)."""
    if importlib.util.find_spec("intel_extension_for_pytorch") is None:
        return False
    from importlib import metadata

    import torch

    def minor(version: str) -> tuple[str, ...]:
        return tuple(version.split("+")[0].split(".")[:2])

    return minor(metadata.version("intel-extension-for-pytorch")) == minor(torch.__version__)
