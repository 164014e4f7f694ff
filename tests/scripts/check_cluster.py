"""Started by any launcher: prints how this process sees its job, after one all_reduce.

Prints ``CLUSTER {json}`` (one line per process).
"""

from __future__ import annotations

import json
import sys

import torch

from drivetrain import PartialState

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
    "distributed_type": str(state.distributed_type),
    "platform": selection.platform.name,
    "sum": total,
})
sys.stdout.write(line + "\n")  # one write: lines of several processes sharing a pipe do not mix
sys.stdout.flush()
state.wait_for_everyone()
state.destroy_process_group()
