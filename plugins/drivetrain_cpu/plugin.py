"""The ``cpu`` platform: always available, the lowest priority, the fallback everywhere."""

from __future__ import annotations

from drivetrain.plugin_api import PlatformSpec, PluginInfo, Probe, hookimpl

PLUGIN_INFO = PluginInfo(api_version="1.0", description="CPU platform (gloo between processes)")


def _probe() -> Probe:
    import os

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
