"""``drivetrain launch`` through PyTorch's elastic launcher (``torch.distributed.run``),
and a plain subprocess for a single process."""

from __future__ import annotations

from drivetrain.plugin_api import LauncherSpec, PluginInfo, hookimpl

PLUGIN_INFO = PluginInfo(api_version="1.0", description="launch through torchrun (torch.distributed.run)")


def _multi(args) -> bool:
    return args.num_processes > 1 or args.num_machines > 1


@hookimpl
def drivetrain_register_launchers():
    return [
        LauncherSpec("torchrun", "drivetrain_torchrun.launcher:launch_torchrun", applies=_multi, priority=10,
                     description="torch.distributed.run (elastic agent, static or c10d rendezvous)"),
        LauncherSpec("single", "drivetrain_torchrun.launcher:launch_single", applies=lambda args: not _multi(args),
                     priority=10, description="one process, no agent"),
    ]
