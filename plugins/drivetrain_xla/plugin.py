"""The ``xla`` platform: TPUs and other PJRT devices through torch_xla.

What a step looks like on XLA (Accelerate's semantics): the model is placed on the XLA
device, the prepared optimizer averages gradients across replicas then steps
(``xm.optimizer_step``) and cuts the lazy graph, prepared data loaders are torch_xla's
``MpDeviceLoader`` (background transfer, one graph per batch), and every collective of the
run is XLA's own. ``drivetrain launch --tpu`` starts the script's main function through
``xmp.spawn``, or on every VM of a pod.

It also owns the top-level keys Accelerate writes for TPUs (``tpu_env``, ``tpu_use_cluster``,
``downcast_bf16``, ...), so an unchanged Accelerate config file loads wherever drivetrain
runs: left at their defaults they are accepted even without torch_xla; set to something
else they need this plugin's library, and the error says how to install it.
"""

from __future__ import annotations

import importlib.util
import os

from drivetrain.plugin_api import (
    ClusterEnvironmentSpec,
    ConfigField,
    ConfigSection,
    EnvReportLine,
    LauncherSpec,
    PlatformSpec,
    PluginInfo,
    Probe,
    hookimpl,
)

PLUGIN_INFO = PluginInfo(api_version="2.0", description="TPUs and other PJRT devices through torch_xla",
                         requires=("torch-xla>=2.4",), extra="xla")

NAME = "xla"


def _tpu_device_files() -> list[str]:
    import glob

    return glob.glob("/dev/accel*") + glob.glob("/dev/vfio/[0-9]*")


def probe() -> Probe:
    # Reads the environment only: opening the runtime here would hold the TPU, and the
    # processes the launcher starts could not open it.
    if importlib.util.find_spec("torch_xla") is None:
        return Probe(False, f"torch_xla is not installed ({PLUGIN_INFO.how_to_install()})")
    device = os.environ.get("PJRT_DEVICE")
    if device:
        return Probe(True, f"PJRT_DEVICE={device}")
    if importlib.util.find_spec("libtpu") is not None and _tpu_device_files():
        return Probe(True, "a TPU (libtpu and its device files)")
    # torch_xla would fall back to the host CPU: not a reason to prefer it to the cpu platform.
    return Probe(False, "torch_xla is installed but no TPU is here; set PJRT_DEVICE (TPU, CPU, CUDA) to use it")


def is_torch_xla_available(check_is_tpu: bool = False, check_is_gpu: bool = False) -> bool:
    """Whether torch_xla is installed (and, when asked, whether its device is a TPU or a GPU)."""
    if importlib.util.find_spec("torch_xla") is None:
        return False
    if check_is_tpu or check_is_gpu:
        import torch_xla.runtime as xr

        kind = xr.device_type()
        return (check_is_tpu and kind == "TPU") or (check_is_gpu and kind in ("GPU", "CUDA"))
    return True


def spawned_probe() -> Probe:
    # xmp.spawn sets these in every replica it starts (one process per device, or this one)
    if os.environ.get("PJRT_LOCAL_PROCESS_COUNT") and os.environ.get("PJRT_DEVICE"):
        return Probe(True, f"started by xmp.spawn ({os.environ['PJRT_LOCAL_PROCESS_COUNT']} local process(es))")
    return Probe(False, "not started by xmp.spawn")


def spawned_environment():
    """The position of an ``xmp.spawn`` replica, as torch_xla's runtime reports it."""
    import torch_xla.runtime as xr

    from drivetrain.plugin_api import ClusterEnvironment

    world = int(xr.world_size())
    local = int(os.environ.get("PJRT_LOCAL_PROCESS_COUNT", "1") or 1)
    return ClusterEnvironment(name="xmp-spawn", world_size=world, rank=int(xr.global_ordinal()),
                              local_rank=int(xr.local_ordinal()), local_world_size=local,
                              num_nodes=max(world // max(local, 1), 1))


# ------------------------------------------------------------------ registration


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
            communication=None,  # this plugin: torch_xla's process group and XLA collectives
            description="TPU / PJRT devices",
        )
    ]


@hookimpl
def drivetrain_register_cluster_environments():
    return [ClusterEnvironmentSpec("xmp-spawn", "drivetrain_xla.plugin:spawned_environment", spawned_probe,
                                   priority=90, description="replicas started by torch_xla's xmp.spawn")]


@hookimpl
def drivetrain_register_launchers():
    return [LauncherSpec("xla", "drivetrain_xla.launcher:launch_xla", applies=_launcher_applies, priority=30,
                         description="xmp.spawn on this machine, or every VM of a TPU pod (--tpu-use-cluster)")]


def _launcher_applies(args) -> bool:
    from .launcher import applies

    return applies(args)


@hookimpl
def drivetrain_enum_members():
    return {"DistributedType": ["XLA"], "RNGType": ["xla"]}


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
                # read by `tpu-config`, which runs on a workstation without torch_xla
                ConfigField("tpu_name", str, None, help="name of the TPU", needs_library=False),
                ConfigField("tpu_zone", str, None, help="zone of the TPU", needs_library=False),
                ConfigField("tpu_vm", list, None, help="VM instance names of the pod", needs_library=False),
                ConfigField("command_file", str, None, help="file of commands to run on the pod first",
                            needs_library=False),
                ConfigField("commands", list, None, help="commands to run on the pod first", needs_library=False),
            ),
            enabled_when="XLA",
            description="TPU settings (Accelerate's tpu_* keys)",
        )
    ]


@hookimpl
def drivetrain_add_launch_arguments(parser):
    group = parser.add_argument_group("XLA/TPU", "launch through torch_xla (xmp.spawn), on this machine or a TPU pod")
    group.add_argument("--tpu", action="store_true", default=None,
                       help="run the script's main function on every XLA device through xmp.spawn")
    group.add_argument("--tpu-use-cluster", "--tpu-cluster", dest="tpu_use_cluster", action="store_true",
                       default=None, help="run the launch on every VM of a TPU pod (tpu_name, tpu_zone from the config)")
    group.add_argument("--tpu-use-sudo", action="store_true", default=None,
                       help="run the pod's launch through sudo")
    group.add_argument("--vm", dest="tpu_vm", action="append", default=None,
                       help="a Compute VM of the pod (repeat, or comma-separated); default: every worker of the TPU")
    group.add_argument("--env", dest="tpu_env", action="append", default=None,
                       help="NAME=value to set on the pod's VMs (repeat)")
    group.add_argument("--main-training-function", default=None,
                       help="the function of the script that --tpu runs (default main)")
    group.add_argument("--downcast-bf16", action="store_true", default=None,
                       help="with bf16 on XLA, keep float64 tensors in float32 (XLA_DOWNCAST_BF16)")


@hookimpl
def drivetrain_launch_environment(args):
    from .helpers import bf16_environment

    downcast = getattr(args, "downcast_bf16", None)
    config = getattr(args, "config", None)
    if downcast is None and config is not None:
        downcast = config.get("downcast_bf16", "no")
    if getattr(args, "platform", None) == NAME:
        return bf16_environment(getattr(args, "mixed_precision", None), downcast) or None
    if str(downcast or "no").lower() in ("yes", "true", "1"):  # Accelerate's file on another platform
        return {"XLA_DOWNCAST_BF16": "1"}
    return None


@hookimpl
def drivetrain_env_report():
    if importlib.util.find_spec("torch_xla") is None:
        return [EnvReportLine("torch_xla", "not installed")]
    from importlib import metadata

    return [EnvReportLine("torch_xla", metadata.version("torch-xla")),
            EnvReportLine("PJRT_DEVICE", os.environ.get("PJRT_DEVICE", "(not set)"))]


@hookimpl
def drivetrain_add_cli_commands(subparsers):
    from .tpu_config import tpu_command_parser

    tpu_command_parser(subparsers)


@hookimpl
def drivetrain_public_names():
    # Accelerate's `accelerate.commands.tpu`, the platform's probe and its XLA helpers
    return {"commands.tpu.tpu_command_parser": "drivetrain_xla.tpu_config:tpu_command_parser",
            "commands.tpu.tpu_command_launcher": "drivetrain_xla.tpu_config:tpu_command_launcher",
            "utils.is_torch_xla_available": "drivetrain_xla.plugin:is_torch_xla_available",
            "utils.install_xla": "drivetrain_xla.helpers:install_xla",
            "utils.torch_xla.install_xla": "drivetrain_xla.helpers:install_xla",  # Accelerate's module of it
            "utils.prepare_tpu": "drivetrain_xla.helpers:prepare_tpu"}


# ------------------------------------------------------------------ the run (xla is the platform)


@hookimpl(tryfirst=True)
def drivetrain_init_distributed(run, timeout, backend, init_method):
    if backend not in (None, "xla") or init_method not in (None, "xla://"):
        return None
    from .platform import init_process_group

    init_process_group(timeout)
    return True


@hookimpl(tryfirst=True)
def drivetrain_collectives(run):
    from .collectives import XlaCollectives

    return XlaCollectives()


@hookimpl(tryfirst=True)
def drivetrain_wrap_model(model, run, evaluation_mode):
    # Replicas average gradients in the optimizer step (xm.optimizer_step), not in a DDP
    # wrapper; a strategy asked for by name (FSDP, ...) is left to wrap.
    if run.selection.strategy is None or run.selection.strategy.automatic:
        return model
    return None


@hookimpl(tryfirst=True)
def drivetrain_wrap_optimizer(optimizer, run):
    from .optimizer import XlaOptimizer

    # no grad scaler: XLA runs bf16, which needs none
    return XlaOptimizer(optimizer, device=run.state.device)


