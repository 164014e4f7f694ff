"""The ``xla`` platform: TPUs and other PJRT devices through torch_xla.

It also owns the top-level keys Accelerate writes for TPUs (``tpu_env``, ``tpu_use_cluster``,
``downcast_bf16``, ...), so an unchanged Accelerate config file loads wherever drivetrain
runs: left at their defaults they are accepted even without torch_xla; set to something
else they need this plugin's library, and the error says how to install it.
"""

from __future__ import annotations

import importlib.util

from drivetrain.plugin_api import (
    ConfigField,
    ConfigSection,
    EnvReportLine,
    PlatformSpec,
    PluginInfo,
    Probe,
    hookimpl,
)

PLUGIN_INFO = PluginInfo(api_version="1.2", description="TPUs and other PJRT devices through torch_xla",
                         requires=("torch-xla>=2.4",), extra="xla")

NAME = "xla"


def probe() -> Probe:
    if importlib.util.find_spec("torch_xla") is None:
        return Probe(False, "torch_xla is not installed (pip install 'drivetrain[xla]')")
    try:
        import torch_xla
        import torch_xla.runtime as xr

        count = torch_xla.device_count()
        kind = xr.device_type()
    except Exception as exc:  # the runtime refuses to start: no device, bad PJRT_DEVICE
        return Probe(False, f"torch_xla cannot start its runtime: {type(exc).__name__}: {exc}")
    if not count:
        return Probe(False, "torch_xla sees no device")
    return Probe(True, f"{count} {kind} device(s) through torch_xla")


@hookimpl
def drivetrain_register_platforms():
    return [
        PlatformSpec(
            name=NAME,
            factory="drivetrain_xla.platform:XlaPlatform",
            probe=probe,
            priority=150,
            multi_process_type="XLA",
            single_process_type="XLA",
            precisions=("bf16",),
            communication="torch_distributed",
            description="TPU / PJRT devices",
        )
    ]


@hookimpl(tryfirst=True)
def drivetrain_init_distributed(run, timeout, backend, init_method):
    # Called only when xla is the run's platform: its processes meet through torch_xla.
    if backend not in (None, "xla") or init_method not in (None, "xla://"):
        return None
    from .platform import init_process_group

    init_process_group(timeout)
    return True


@hookimpl
def drivetrain_register_config_sections():
    return [
        ConfigSection(
            key="",
            fields=(
                ConfigField("downcast_bf16", str, "no", choices=("no", "yes"), ask=True,
                            help="with bf16, keep float64 tensors in float32 instead of bfloat16"),
                ConfigField("tpu_env", list, [], help="environment variables to set on the TPU VMs"),
                ConfigField("tpu_use_cluster", bool, False, help="the job runs on a TPU pod"),
                ConfigField("tpu_use_sudo", bool, False, help="use sudo to run commands on the pod's VMs"),
                ConfigField("tpu_name", str, None, help="name of the TPU"),
                ConfigField("tpu_zone", str, None, help="zone of the TPU"),
                ConfigField("tpu_vm", list, None, help="VM instance names of the pod"),
                ConfigField("command_file", str, None, help="file of commands to run on the pod first"),
                ConfigField("commands", list, None, help="commands to run on the pod first"),
            ),
            enabled_when="XLA",
            description="TPU settings (Accelerate's tpu_* keys)",
        )
    ]


@hookimpl
def drivetrain_launch_environment(args):
    config = getattr(args, "config", None)
    if config is None or str(config.get("downcast_bf16", "no")).lower() != "yes":
        return None
    return {"XLA_DOWNCAST_BF16": "1"}


@hookimpl
def drivetrain_env_report():
    if importlib.util.find_spec("torch_xla") is None:
        return [EnvReportLine("torch_xla", "not installed")]
    from importlib import metadata

    return [EnvReportLine("torch_xla", metadata.version("torch-xla"))]


@hookimpl
def drivetrain_add_cli_commands(subparsers):
    from .tpu_config import tpu_command_parser

    tpu_command_parser(subparsers)


@hookimpl
def drivetrain_public_names():
    # Accelerate's `accelerate.commands.tpu` and the platform's probe
    return {"commands.tpu.tpu_command_parser": "drivetrain_xla.tpu_config:tpu_command_parser",
            "commands.tpu.tpu_command_launcher": "drivetrain_xla.tpu_config:tpu_command_launcher",
            "utils.is_torch_xla_available": "drivetrain_xla.plugin:is_torch_xla_available"}


def is_torch_xla_available(check_is_tpu: bool = False, check_is_gpu: bool = False) -> bool:
    """Whether torch_xla is installed (and, when asked, whether its device is a TPU or a GPU)."""
    import importlib.util

    if importlib.util.find_spec("torch_xla") is None:
        return False
    if check_is_tpu or check_is_gpu:
        import torch_xla.runtime as xr

        kind = xr.device_type()
        return (check_is_tpu and kind == "TPU") or (check_is_gpu and kind in ("GPU", "CUDA"))
    return True
