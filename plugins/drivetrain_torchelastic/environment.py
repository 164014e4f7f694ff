"""Ranks as torchrun (torch.distributed.run) exports them."""

from __future__ import annotations

import os
from typing import Mapping

from drivetrain.plugin_api import ClusterEnvironment, int_var


def from_env_variables(env: Mapping[str, str] | None = None, name: str = "env") -> ClusterEnvironment:
    env = os.environ if env is None else env
    world_size = int_var(env, "WORLD_SIZE", default=1)
    local_world_size = int_var(env, "LOCAL_WORLD_SIZE", default=world_size)
    rank = int_var(env, "RANK", default=0)
    return ClusterEnvironment(
        name=name,
        world_size=world_size,
        rank=rank,
        local_rank=int_var(env, "LOCAL_RANK", default=rank % max(local_world_size, 1)),
        local_world_size=local_world_size,
        node_rank=int_var(env, "GROUP_RANK", "NODE_RANK", default=rank // max(local_world_size, 1)),
        num_nodes=max(world_size // max(local_world_size, 1), 1),
        master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
        master_port=int_var(env, "MASTER_PORT", default=29500),
    )


def from_torchelastic(env: Mapping[str, str] | None = None) -> ClusterEnvironment:
    return from_env_variables(env, name="torchelastic")
