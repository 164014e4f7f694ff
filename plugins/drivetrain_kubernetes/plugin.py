"""Recognises a pod of a Kubeflow PyTorchJob that runs the script directly (one process per pod)."""

from __future__ import annotations

import os

from drivetrain.plugin_api import ClusterEnvironmentSpec, PluginInfo, Probe, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="Kubernetes PyTorchJob pods")


def probe(env=None) -> Probe:
    env = os.environ if env is None else env
    if "KUBERNETES_SERVICE_HOST" not in env:
        return Probe(False, "not in a Kubernetes pod (KUBERNETES_SERVICE_HOST not set)")
    if "PET_NNODES" in env and "TORCHELASTIC_RUN_ID" not in env:
        return Probe(False, "elastic PyTorchJob: run the script with `drivetrain launch` (it reads PET_* variables)")
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR") if name not in env]
    if missing:
        return Probe(False, f"Kubernetes pod without {', '.join(missing)}: not a PyTorchJob")
    return Probe(True, f"PyTorchJob pod: rank {env['RANK']} of {env['WORLD_SIZE']}, master {env['MASTER_ADDR']}")


@hookimpl
def drivetrain_register_cluster_environments():
    return [ClusterEnvironmentSpec("kubernetes", "drivetrain_kubernetes.environment:from_pytorchjob", probe,
                                   priority=60, description="Kubeflow PyTorchJob")]

