"""The module the ``toyaccel`` entry point names: the plugin's declaration and its hooks.

drivetrain imports this whenever it discovers plugins (even for ``drivetrain plugins
list``), so it stays cheap: no torch, nothing of the vendor's runtime. The platform class and
the strategy's role object are named by strings and imported only when a run chooses them;
the probe reads the environment only.
"""

from __future__ import annotations

import os

from drivetrain.plugin_api import EnvReportLine, PlatformSpec, PluginInfo, Probe, StrategySpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="2.0",  # strategies as one role object per run
    description="toyaccel devices (a pretend accelerator on CPU tensors; toyccl between processes)",
    install_hint="pip install drivetrain-toyaccel",
)

NAME = "toyaccel"
#: Above cpu (0): a machine with a toyaccel device uses it unless told otherwise. Below
#: cuda (100): a vendor picks where it stands among the others.
PRIORITY = 50
DEVICES_VARIABLE = "TOYACCEL_DEVICES"  # the same as runtime.DEVICES_VARIABLE, read without importing torch


def probe() -> Probe:
    """Usable when the runtime reports a device. A real vendor asks its driver here, cheaply
    and without initialising the device (a notebook may fork workers afterwards)."""
    text = os.environ.get(DEVICES_VARIABLE, "").strip()
    if text and not text.isdigit():
        return Probe(False, f"{DEVICES_VARIABLE}={text!r} is not a number of devices")
    count = int(text or 0)
    if count == 0:
        return Probe(False, f"no toyaccel device ({DEVICES_VARIABLE} is {'0' if text else 'unset'})")
    return Probe(True, f"{count} toyaccel device(s)", {"device_count": count})


@hookimpl
def drivetrain_register_platforms():
    return [
        PlatformSpec(
            name=NAME,
            factory="drivetrain_toyaccel.platform:ToyAccelPlatform",
            probe=probe,
            priority=PRIORITY,
            multi_process_type="MULTI_TOYACCEL",
            single_process_type="NO",
            precisions=("bf16",),
            # the torch_distributed plugin creates the process group with the platform's
            # default_backend (toyccl) and provides the collectives over it
            communication="torch_distributed",
            description="toyaccel devices (one per process)",
        )
    ]


@hookimpl
def drivetrain_register_strategies():
    # A vendor's strategy: its run hooks and per-run state live on the class `hooks` names.
    return [StrategySpec(name="toyaverage", accelerator_arguments=("toyaverage_plugin",),
                         hooks="drivetrain_toyaccel.strategy:GradientAveraging",
                         description="average gradients over the processes at the end of each window")]


@hookimpl
def drivetrain_enum_members():
    # ``RNGType.TOYACCEL`` names the device generator (as ``RNGType.XLA`` names XLA's): user code
    # passes it to ``synchronize_rng_state`` or ``Accelerator(rng_types=[...])``
    return {"RNGType": [NAME]}


@hookimpl
def drivetrain_env_report():
    answer = probe()
    lines = [EnvReportLine("toyaccel devices", answer.reason)]
    if answer.available:
        from .runtime import memory_per_device

        try:
            lines.append(EnvReportLine("toyaccel memory per device", f"{memory_per_device() / 2**30:.2f} GiB"))
        except ValueError as exc:  # the report must never fail
            lines.append(EnvReportLine("toyaccel memory per device", f"unknown ({exc})"))
    return lines
