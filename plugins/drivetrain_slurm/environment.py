"""Ranks and the rendezvous address of a SLURM job step."""

from __future__ import annotations

import os
import re
from typing import Mapping

from drivetrain.plugin_api import ClusterEnvironment, int_var


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``"gpu[03-05,07],cpu1"`` -> ``"gpu03"``."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        return nodelist
    prefix, ranges = match.groups()
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def from_slurm(env: Mapping[str, str] | None = None) -> ClusterEnvironment:
    env = os.environ if env is None else env
    world_size = int_var(env, "SLURM_NTASKS", default=1)
    num_nodes = int_var(env, "SLURM_NNODES", "SLURM_JOB_NUM_NODES", default=1)
    local_world_size = int_var(env, "SLURM_NTASKS_PER_NODE", default=max(world_size // max(num_nodes, 1), 1))
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    job_id = int_var(env, "SLURM_JOB_ID", default=0)
    return ClusterEnvironment(
        name="slurm",
        world_size=world_size,
        rank=int_var(env, "SLURM_PROCID", default=0),
        local_rank=int_var(env, "SLURM_LOCALID", default=0),
        local_world_size=local_world_size,
        node_rank=int_var(env, "SLURM_NODEID", default=0),
        num_nodes=num_nodes,
        master_addr=env.get("MASTER_ADDR") or (first_host(nodelist) if nodelist else "127.0.0.1"),
        # a port derived from the job id lets concurrent jobs on one node avoid each other
        master_port=int_var(env, "MASTER_PORT", default=20000 + job_id % 20000),
    )
