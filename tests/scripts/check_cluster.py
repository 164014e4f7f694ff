"""Started by any launcher: prints how this process sees its job, after one all_reduce.

Prints ``CLUSTER {json}`` (one line per process).
"""

from __future__ import annotations

import json
import os
import sys

import torch

from drivetrain import PartialState

#: What torch's elastic agent sets in each worker, beside the variables every launcher sets.
AGENT_VARIABLES = ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
                   "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                   "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
                   "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS")


def parent_has_torch() -> bool | None:
    """Whether the launcher (this process's parent) has torch's library loaded; None off Linux."""
    try:
        with open(f"/proc/{os.getppid()}/maps", encoding="utf-8", errors="replace") as maps:
            return "libtorch" in maps.read()
    except OSError:
        return None


state = PartialState()
total = state.collectives.all_reduce(torch.tensor([state.process_index + 1.0]), "sum").item()
selection = state.run.selection
line = "CLUSTER " + json.dumps({
    "cluster": state.cluster.name,
    "cluster_plugin": selection.cluster_plugin,
    "rank": state.process_index,
    "local_rank": state.local_process_index,
    "world_size": state.num_processes,
    "num_machines": state.num_machines,
    "distributed_type": state.distributed_type.value,
    "platform": selection.platform.name,
    "sum": total,
    "agent_variables": {name: os.environ.get(name) for name in AGENT_VARIABLES},
    "parent_has_torch": parent_has_torch(),
})
sys.stdout.write(line + "\n")  # one write: lines of several processes sharing a pipe do not mix
sys.stdout.flush()
state.wait_for_everyone()
state.destroy_process_group()
