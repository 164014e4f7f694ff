"""Recognises processes started by mpirun/mpiexec: Open MPI, MPICH / Intel MPI (PMI), PMIx."""

from __future__ import annotations

import os

from drivetrain.plugin_api import (
    ClusterEnvironmentSpec,
    ConfigField,
    ConfigSection,
    LauncherSpec,
    PluginInfo,
    Probe,
    hookimpl,
)

PLUGIN_INFO = PluginInfo(api_version="2.0", description="MPI launchers (Open MPI, MPICH, Intel MPI)")

FLAVOURS = {
    "Open MPI": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    "MPICH/Intel MPI": ("PMI_RANK", "PMI_SIZE"),
    "PMIx": ("PMIX_RANK", "PMIX_SIZE"),
}


def probe(env=None) -> Probe:
    env = os.environ if env is None else env
    for flavour, (rank, size) in FLAVOURS.items():
        if rank in env and size in env:
            return Probe(True, f"{flavour}: rank {env[rank]} of {env[size]}")
    return Probe(False, "no MPI rank variable (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK)")


@hookimpl
def drivetrain_register_cluster_environments():
    return [ClusterEnvironmentSpec("mpi", "drivetrain_mpi.environment:from_mpi", probe, priority=40,
                                   description="mpirun / mpiexec")]


@hookimpl
def drivetrain_add_launch_arguments(parser):
    group = parser.add_argument_group("MPI", "CPU processes on several machines through mpirun (plugin mpi)")
    group.add_argument("--mpirun-hostfile", help="hostfile of the machines; the job is started with mpirun")
    group.add_argument("--mpirun-ccl", help="oneCCL worker threads per process (CCL_WORKER_COUNT) with mpirun")


@hookimpl
def drivetrain_register_config_sections():
    # Accelerate's `mpirun_config:` block; its keys fill the options above
    return [ConfigSection("mpirun_config", fields=(
        ConfigField("mpirun_hostfile", str, None, help="hostfile of the machines (start the job with mpirun)"),
        ConfigField("mpirun_ccl", str, None, env="CCL_WORKER_COUNT",
                    help="oneCCL worker threads per process (CCL_WORKER_COUNT)"),
    ), enabled_when="MULTI_CPU", description="CPU processes on several machines through mpirun")]


@hookimpl
def drivetrain_register_launchers():
    return [LauncherSpec("mpirun", "drivetrain_mpi.launcher:launch_mpirun",
                         applies=lambda args: bool(getattr(args, "mpirun_hostfile", None)), priority=20,
                         description="mpirun with a hostfile (Open MPI, MPICH, Intel MPI)",
                         command_prefix="drivetrain_mpi.launcher:mpirun_prefix")]
