"""``drivetrain launch``: several processes on one machine started directly (``local``), jobs
that need the elastic agent through ``torch.distributed.run``, a plain subprocess for one."""

from __future__ import annotations

from drivetrain.plugin_api import LauncherSpec, PluginInfo, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="launch processes: on one machine directly, else through torchrun")


def _multi(args) -> bool:
    return args.num_processes > 1 or args.num_machines > 1


def _local(args) -> bool:
    """Several processes on this machine alone, asking nothing only the elastic agent does
    (an elastic rendezvous, ``--tee``, ``--log-dir``)."""
    return (args.num_machines == 1 and args.num_processes > 1 and (args.rdzv_backend or "static") == "static"
            and str(args.tee or "0") == "0" and not args.log_dir)


@hookimpl
def drivetrain_register_launchers():
    return [
        LauncherSpec("local", "drivetrain_torchrun.local:launch_local", applies=_local, priority=15,
                     description="several processes on this machine, started without the elastic agent "
                                 "(no torch in the launcher)"),
        LauncherSpec("torchrun", "drivetrain_torchrun.launcher:launch_torchrun", applies=_multi, priority=10,
                     description="torch.distributed.run (elastic agent, static or c10d rendezvous)"),
        LauncherSpec("single", "drivetrain_torchrun.launcher:launch_single", applies=lambda args: not _multi(args),
                     priority=10, description="one process, no agent"),
    ]
