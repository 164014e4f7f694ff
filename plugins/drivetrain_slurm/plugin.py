"""Recognises one process per SLURM task (``srun python train.py``)."""

from __future__ import annotations

import os

from drivetrain.plugin_api import ClusterEnvironmentSpec, PluginInfo, Probe, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="SLURM tasks (srun) as processes")


def probe(env=None) -> Probe:
    env = os.environ if env is None else env
    if "SLURM_PROCID" not in env or "SLURM_NTASKS" not in env:
        return Probe(False, "SLURM_PROCID/SLURM_NTASKS not set")
    if env.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return Probe(False, "interactive SLURM shell: launch with srun or drivetrain launch")
    return Probe(True, f"SLURM task {env['SLURM_PROCID']} of {env['SLURM_NTASKS']} (job {env.get('SLURM_JOB_ID', '?')})")


@hookimpl
def drivetrain_register_cluster_environments():
    return [ClusterEnvironmentSpec("slurm", "drivetrain_slurm.environment:from_slurm", probe, priority=50,
                                   description="one process per SLURM task")]
