"""The ``cuda`` platform: NVIDIA GPUs, NCCL between processes.

Detection asks ``torch.cuda.is_available()`` (imported inside the probe, never at discovery)
and never initialises CUDA, so a notebook can still fork its workers afterwards.
"""

from __future__ import annotations

import sys

from drivetrain.plugin_api import (
    BackendFlag,
    ConfigField,
    ConfigSection,
    EnvReportLine,
    PlatformSpec,
    PluginInfo,
    Probe,
    hookimpl,
)

PLUGIN_INFO = PluginInfo(api_version="2.0", description="NVIDIA GPUs through torch.cuda (NCCL between processes)")

NAME = "cuda"


def probe() -> Probe:
    """Usable when torch was built with CUDA and sees at least one device."""
    import torch

    built_for = torch.version.cuda
    if built_for is None:
        return Probe(False, f"this torch build ({torch.__version__}) has no CUDA support")
    if not torch.cuda.is_available():
        return Probe(False, f"no CUDA device visible (torch built for CUDA {built_for}); check the driver "
                            "and CUDA_VISIBLE_DEVICES")
    count = torch.cuda.device_count()
    return Probe(True, f"{count} CUDA device(s), CUDA {built_for}", {"device_count": count})


@hookimpl
def drivetrain_register_platforms():
    return [
        PlatformSpec(
            name=NAME,
            factory="drivetrain_cuda.platform:CudaPlatform",
            probe=probe,
            priority=100,
            multi_process_type="MULTI_GPU",
            single_process_type="NO",
            precisions=("fp16", "bf16", "fp8"),
            communication="torch_distributed",
            description="NVIDIA GPUs (one per process)",
        )
    ]


@hookimpl
def drivetrain_register_config_sections():
    # Top-level keys of Accelerate's files that concern GPUs.
    return [
        ConfigSection(
            key="",
            fields=(
                ConfigField("gpu_ids", str, "all", ask=True,
                            help="GPUs to use on this machine, comma separated (all: every GPU)"),
                ConfigField("enable_cpu_affinity", bool, False,
                            help="pin each process to the CPU cores next to its GPU"),
            ),
            enabled_when="MULTI_GPU",
            description="GPU selection",
        )
    ]


class _MultiGpu(BackendFlag):
    """``--multi_gpu``: the cuda platform, or, where no GPU is usable, CPU processes and one
    warning (CI scripts written for Accelerate pass it on machines without GPUs)."""

    request, value = "platform", NAME

    def choose(self, namespace, option_string):
        answer = probe()
        if answer.available:
            super().choose(namespace, option_string)
        else:
            print(f"warning: {option_string} given but {answer.reason}; starting CPU processes instead",
                  file=sys.stderr)


@hookimpl
def drivetrain_add_launch_arguments(parser):
    group = parser.add_argument_group("CUDA", "NVIDIA GPUs (plugin cuda)")
    group.add_argument("--multi-gpu", action=_MultiGpu,
                       help="run on the GPUs (the same as --platform cuda); without a GPU, CPU processes "
                            "with a warning, as Accelerate does")
    group.add_argument("--gpu-ids", help="GPUs of this machine to use, comma separated (default: all)")
    group.add_argument("--enable-cpu-affinity", action="store_true", default=None,
                       help="pin each process to the CPU cores next to its GPU")


@hookimpl
def drivetrain_launch_environment(args):
    if getattr(args, "cpu", None):
        return None
    env = {}
    gpu_ids = getattr(args, "gpu_ids", None)
    if gpu_ids not in (None, "") and str(gpu_ids).strip().lower() != "all":
        env["CUDA_VISIBLE_DEVICES"] = str(gpu_ids).replace(" ", "")
    if getattr(args, "enable_cpu_affinity", None):
        env["DRIVETRAIN_CPU_AFFINITY"] = "1"
    return env


@hookimpl
def drivetrain_env_report():
    import torch

    lines = [EnvReportLine("CUDA (torch build)", str(torch.version.cuda or "none"))]
    if torch.version.cuda is None or not torch.cuda.is_available():
        lines.append(EnvReportLine("CUDA devices", "0"))
        return lines
    count = torch.cuda.device_count()
    lines.append(EnvReportLine("CUDA devices", str(count)))
    for index in range(count):
        props = torch.cuda.get_device_properties(index)
        lines.append(EnvReportLine(f"GPU {index}", f"{props.name}, {props.total_memory / 2**30:.1f} GiB, "
                                                   f"compute capability {props.major}.{props.minor}"))
    try:
        lines.append(EnvReportLine("cuDNN", str(torch.backends.cudnn.version())))
        lines.append(EnvReportLine("NCCL", ".".join(map(str, torch.cuda.nccl.version()))))
    except Exception as exc:  # the report must never fail
        lines.append(EnvReportLine("NCCL", f"unknown ({exc})"))
    return lines


@hookimpl
def drivetrain_public_names():
    return {"utils.check_cuda_fp8_capability": "drivetrain_cuda.fp8:check_cuda_fp8_capability",
            "utils.is_cuda_available": "drivetrain_cuda.plugin:is_cuda_available",
            "utils.is_rocm_available": "drivetrain_cuda.plugin:is_rocm_available",
            "utils.get_gpu_info": "drivetrain_cuda.system:get_gpu_info",
            "utils.check_cuda_p2p_ib_support": "drivetrain_cuda.system:check_cuda_p2p_ib_support",
            "utils.set_numa_affinity": "drivetrain_cuda.system:set_numa_affinity",
            "utils.environment.override_numa_affinity": "drivetrain_cuda.system:override_numa_affinity"}


def is_cuda_available() -> bool:
    """Whether torch sees a CUDA (or ROCm) device."""
    import torch

    return torch.cuda.is_available()


def is_rocm_available() -> bool:
    """Whether torch is a ROCm build and sees a device."""
    import torch

    return torch.version.hip is not None and torch.cuda.is_available()
