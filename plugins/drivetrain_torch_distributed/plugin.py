"""Connects processes through torch.distributed and provides its collectives.

The platform names the backend (gloo for CPU, nccl for CUDA); this plugin creates the
process group with the user's timeout and wraps the torch.distributed calls.
"""

from __future__ import annotations

from drivetrain.plugin_api import EnvReportLine, PluginInfo, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="process groups and collectives over torch.distributed")


@hookimpl
def drivetrain_init_distributed(run, timeout, backend, init_method):
    from .process_group import init_process_group

    init_process_group(run, timeout=timeout, backend=backend, init_method=init_method)
    return True


@hookimpl
def drivetrain_collectives(run):
    from .process_group import TorchCollectives, group_is_ready

    if not group_is_ready():
        return None
    return TorchCollectives()


@hookimpl
def drivetrain_env_report():
    import importlib.metadata

    return [EnvReportLine("torch", importlib.metadata.version("torch"))]
