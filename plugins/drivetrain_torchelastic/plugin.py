"""Recognises processes started by torchrun (and so by ``drivetrain launch``), or given the
plain ``env://`` variables (RANK, WORLD_SIZE, MASTER_ADDR) by some other launcher."""

from __future__ import annotations

import os

from drivetrain.plugin_api import ClusterEnvironmentSpec, PluginInfo, Probe, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="torchrun / torchelastic and plain env:// variables")

_ENV_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR")


def probe_torchelastic(env=None) -> Probe:
    env = os.environ if env is None else env
    if env.get("TORCHELASTIC_RUN_ID") is not None and "RANK" in env and "WORLD_SIZE" in env:
        return Probe(True, f"TORCHELASTIC_RUN_ID set: rank {env['RANK']} of {env['WORLD_SIZE']}")
    return Probe(False, "TORCHELASTIC_RUN_ID is not set")


def probe_env(env=None) -> Probe:
    env = os.environ if env is None else env
    missing = [name for name in _ENV_VARS if name not in env]
    if missing:
        return Probe(False, f"{', '.join(missing)} not set")
    return Probe(True, f"RANK={env['RANK']} WORLD_SIZE={env['WORLD_SIZE']} MASTER_ADDR={env['MASTER_ADDR']}")


@hookimpl
def drivetrain_register_cluster_environments():
    return [
        ClusterEnvironmentSpec("torchelastic", "drivetrain_torchelastic.environment:from_torchelastic",
                               probe_torchelastic, priority=100, description="torchrun / drivetrain launch"),
        ClusterEnvironmentSpec("env", "drivetrain_torchelastic.environment:from_env_variables",
                               probe_env, priority=10, description="RANK/WORLD_SIZE/MASTER_ADDR set by hand"),
    ]
