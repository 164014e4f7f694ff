"""Ranks of a PyTorchJob pod: the operator sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT."""

from __future__ import annotations

import os
from typing import Mapping

from drivetrain.plugin_api import ClusterEnvironment, int_var


def from_pytorchjob(env: Mapping[str, str] | None = None) -> ClusterEnvironment:
    env = os.environ if env is None else env
    world_size = int_var(env, "WORLD_SIZE", default=1)
    rank = int_var(env, "RANK", default=0)
    # One process per pod: each pod is a node of its own.
    return ClusterEnvironment(
        name="kubernetes",
        world_size=world_size,
        rank=rank,
        local_rank=int_var(env, "LOCAL_RANK", default=0),
        local_world_size=int_var(env, "LOCAL_WORLD_SIZE", default=1),
        node_rank=rank,
        num_nodes=world_size,
        master_addr=env["MASTER_ADDR"],
        master_port=int_var(env, "MASTER_PORT", default=23456),
    )
