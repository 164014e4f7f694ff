"""The ``cpu`` platform: always available, the lowest priority, the fallback everywhere."""

from __future__ import annotations

import os

from drivetrain.plugin_api import PlatformSpec, PluginInfo, Probe, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="CPU platform (gloo between processes)")


#: Intel OpenMP's thread placement for CPU training: one thread per core, threads sleep 1 ms
#: after a parallel region (Accelerate sets the same for its CPU launches).
OPENMP_VARIABLES = {"KMP_AFFINITY": "granularity=fine,compact,1,0", "KMP_BLOCKTIME": "1"}


def _probe() -> Probe:
    return Probe(True, f"a CPU is always present ({os.cpu_count()} cores)")


@hookimpl
def drivetrain_register_platforms():
    return [
        PlatformSpec(
            name="cpu",
            factory="drivetrain.plugin_api.platform:Platform",
            probe=_probe,
            priority=0,
            multi_process_type="MULTI_CPU",
            single_process_type="NO",
            communication="torch_distributed",
            description="the machine's CPU",
        )
    ]


@hookimpl
def drivetrain_launch_environment(args):
    """A launch that asked for the CPU (``--cpu``, ``use_cpu: true``, ``DRIVETRAIN_USE_CPU``) gets
    Intel OpenMP's placement variables; values the user already set are kept."""
    if not getattr(args, "cpu", False):
        return None
    return {key: value for key, value in OPENMP_VARIABLES.items() if key not in os.environ}
