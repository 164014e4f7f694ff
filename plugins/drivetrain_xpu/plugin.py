"""The ``xpu`` platform: Intel GPUs through PyTorch's native ``torch.xpu``.

Processes talk over torch.distributed (the ``torch_distributed`` plugin makes the group) with
the ``xccl`` backend of torch 2.8+, or ``ccl`` from oneCCL's bindings where torch has no
XCCL. Detection imports torch inside the probe, never at discovery, and does not initialise
the device runtime.
"""

from __future__ import annotations


from drivetrain.plugin_api import BackendFlag, EnvReportLine, PlatformSpec, PluginInfo, Probe, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="Intel GPUs through torch.xpu (XCCL or oneCCL between processes)")

NAME = "xpu"


def probe() -> Probe:
    """Usable when torch has the XPU backend and sees at least one device."""
    import torch

    xpu = getattr(torch, "xpu", None)
    if xpu is None or not hasattr(xpu, "is_available"):
        return Probe(False, f"this torch ({torch.__version__}) has no torch.xpu (it needs torch 2.4+)")
    if not xpu.is_available():
        return Probe(False, f"no Intel GPU visible to torch {torch.__version__} (an XPU build of torch and the GPU "
                            "driver are needed)")
    count = xpu.device_count()
    return Probe(True, f"{count} Intel GPU(s) through torch.xpu", {"device_count": count})


@hookimpl
def drivetrain_register_platforms():
    return [
        PlatformSpec(
            name=NAME,
            factory="drivetrain_xpu.platform:XpuPlatform",
            probe=probe,
            priority=90,
            multi_process_type="MULTI_XPU",
            single_process_type="NO",
            precisions=("fp16", "bf16"),
            communication="torch_distributed",
            description="Intel GPUs (one per process)",
        )
    ]


@hookimpl
def drivetrain_add_launch_arguments(parser):
    group = parser.add_argument_group("XPU", "Intel GPUs (plugin xpu)")
    group.add_argument("--use-xpu", action=BackendFlag.choosing("platform", NAME),
                       help="run on the Intel GPUs (the same as --platform xpu; detected without it)")


@hookimpl
def drivetrain_env_report():
    import torch

    from .backend import is_ccl_available, is_xccl_available

    xpu = getattr(torch, "xpu", None)
    count = xpu.device_count() if xpu is not None and xpu.is_available() else 0
    lines = [EnvReportLine("XPU devices", str(count))]
    for index in range(count):
        props = xpu.get_device_properties(index)
        lines.append(EnvReportLine(f"XPU {index}", f"{props.name}, {props.total_memory / 2**30:.1f} GiB"))
    lines.append(EnvReportLine("XPU collectives", "xccl" if is_xccl_available() else
                               "ccl (oneCCL bindings)" if is_ccl_available() else "none installed"))
    return lines


@hookimpl
def drivetrain_public_names():
    return {"utils.is_xpu_available": "drivetrain_xpu.plugin:is_xpu_available",
            "utils.is_xccl_available": "drivetrain_xpu.backend:is_xccl_available",
            "utils.is_ccl_available": "drivetrain_xpu.backend:is_ccl_available",
            "utils.XPU_PROFILING_AVAILABLE_PYTORCH_VERSION":
                "drivetrain_xpu.backend:XPU_PROFILING_AVAILABLE_PYTORCH_VERSION"}


def is_xpu_available(check_device: bool = False) -> bool:
    """Whether torch has an XPU device (with ``check_device``, also that one can be used)."""
    import torch

    xpu = getattr(torch, "xpu", None)
    if xpu is None or not xpu.is_available():
        return False
    if check_device:
        try:
            torch.empty(1, device="xpu")
        except RuntimeError:
            return False
    return True
