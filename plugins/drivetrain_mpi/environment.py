"""Ranks of an MPI job, from whichever MPI implementation started it."""

from __future__ import annotations

import os
from typing import Mapping

from drivetrain.plugin_api import ClusterEnvironment, ConfigError, int_var


def from_mpi(env: Mapping[str, str] | None = None) -> ClusterEnvironment:
    env = os.environ if env is None else env
    world_size = int_var(env, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", default=1)
    rank = int_var(env, "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", default=0)
    local_world_size = int_var(env, "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PALS_LOCAL_SIZE",
                               default=world_size)
    local_rank = int_var(env, "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PALS_LOCAL_RANKID",
                         default=rank % max(local_world_size, 1))
    master_addr = env.get("MASTER_ADDR")
    if world_size > 1 and not master_addr:
        raise ConfigError(
            "MPI job without MASTER_ADDR: export MASTER_ADDR=<host of rank 0> (and MASTER_PORT) "
            "to every process, e.g. `mpirun -x MASTER_ADDR=node0 -x MASTER_PORT=29500 ...`"
        )
    return ClusterEnvironment(
        name="mpi",
        world_size=world_size,
        rank=rank,
        local_rank=local_rank,
        local_world_size=local_world_size,
        node_rank=rank // max(local_world_size, 1),
        num_nodes=max(world_size // max(local_world_size, 1), 1),
        master_addr=master_addr or "127.0.0.1",
        master_port=int_var(env, "MASTER_PORT", default=29500),
    )
