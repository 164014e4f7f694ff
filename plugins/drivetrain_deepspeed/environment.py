"""Ranks of processes started by DeepSpeed's launcher (``deepspeed.launcher.launch``).

Besides the ``env://`` variables it sets ``LOCAL_SIZE`` (processes on this machine),
``CROSS_RANK`` (this machine's index) and ``CROSS_SIZE`` (machines), which place a process
correctly when machines run different numbers of processes.
"""

from __future__ import annotations

import os
from typing import Mapping

from drivetrain.plugin_api import ClusterEnvironment, Probe, int_var

_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")


def probe_deepspeed_launcher(env: Mapping[str, str] | None = None) -> Probe:
    env = os.environ if env is None else env
    missing = [name for name in _VARIABLES if name not in env]
    if missing:
        return Probe(False, f"{', '.join(missing)} not set: not started by DeepSpeed's launcher")
    return Probe(True, f"DeepSpeed launcher: rank {env['RANK']} of {env['WORLD_SIZE']}, machine "
                       f"{env['CROSS_RANK']} of {env['CROSS_SIZE']}")


def from_deepspeed_launcher(env: Mapping[str, str] | None = None) -> ClusterEnvironment:
    env = os.environ if env is None else env
    return ClusterEnvironment(
        name="deepspeed-launcher",
        world_size=int_var(env, "WORLD_SIZE", default=1),
        rank=int_var(env, "RANK", default=0),
        local_rank=int_var(env, "LOCAL_RANK", default=0),
        local_world_size=int_var(env, "LOCAL_SIZE", default=1),
        node_rank=int_var(env, "CROSS_RANK", default=0),
        num_nodes=int_var(env, "CROSS_SIZE", default=1),
        master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
        master_port=int_var(env, "MASTER_PORT", default=29500),
    )
