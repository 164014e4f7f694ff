"""The ``mps`` platform: the GPU of Apple silicon Macs through torch.mps, one process.

Detection asks ``torch.backends.mps`` (imported inside the probe, never at discovery). MPS
has no torch.distributed backend, so the platform declares no communication plugin: a job of
several processes on it is refused when the run is resolved (in ``drivetrain launch``, before
any process starts), with the fix.
"""

from __future__ import annotations


from drivetrain.plugin_api import BackendFlag, EnvReportLine, PlatformSpec, PluginInfo, Probe, hookimpl

from .support import BF16_MACOS, macos_version, precisions

PLUGIN_INFO = PluginInfo(api_version="2.0", description="Apple silicon GPUs through torch.mps (one process)")

NAME = "mps"


def probe() -> Probe:
    """Usable when torch was built with MPS and the Mac offers it (macOS 12.3+, Apple silicon)."""
    import torch

    if not torch.backends.mps.is_built():
        return Probe(False, f"this torch build ({torch.__version__}) has no MPS support (MPS needs a macOS build "
                            "of torch on Apple silicon)")
    if not torch.backends.mps.is_available():
        return Probe(False, "torch has MPS but the device is not available (it needs macOS 12.3 or newer on Apple "
                            "silicon)")
    version = macos_version()
    where = f"macOS {'.'.join(map(str, version))}" if version else "this Mac"
    return Probe(True, f"Apple silicon GPU on {where} (bf16 needs macOS {BF16_MACOS[0]}+)",
                 {"precisions": precisions()})


@hookimpl
def drivetrain_register_platforms():
    return [
        PlatformSpec(
            name=NAME,
            factory="drivetrain_mps.platform:MpsPlatform",
            probe=probe,
            priority=50,
            multi_process_type="NO",
            single_process_type="NO",
            precisions=precisions(),
            # None and no drivetrain_collectives here: several processes are refused by
            # selection ("need plugin 'mps' to connect them") before they start.
            communication=None,
            description="Apple silicon GPU (one process; bf16 on macOS 14+)",
        )
    ]


@hookimpl
def drivetrain_add_launch_arguments(parser):
    group = parser.add_argument_group("MPS", "Apple silicon GPUs (plugin mps)")
    group.add_argument("--use-mps-device", action=BackendFlag.choosing("platform", NAME),
                       help="run on the Mac's GPU (the same as --platform mps; detected without it)")


@hookimpl
def drivetrain_env_report():
    version = macos_version()
    lines = [EnvReportLine("macOS", ".".join(map(str, version)) if version else "not macOS")]
    import torch

    lines.append(EnvReportLine("MPS (torch build)", "yes" if torch.backends.mps.is_built() else "no"))
    lines.append(EnvReportLine("MPS available", "yes" if torch.backends.mps.is_available() else "no"))
    return lines


@hookimpl
def drivetrain_public_names():
    return {"utils.is_mps_available": "drivetrain_mps.plugin:is_mps_available"}


def is_mps_available(min_version: str = "1.12") -> bool:
    """Whether torch (``min_version`` or newer) was built with MPS and the device is available."""
    import torch

    from drivetrain.plugin_api import is_torch_version

    return is_torch_version(">=", min_version) and torch.backends.mps.is_built() and torch.backends.mps.is_available()
