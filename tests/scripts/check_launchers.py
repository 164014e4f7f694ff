"""Run with plain python (not launched): notebook_launcher and debug_launcher fork real workers
from this process, as a notebook would. Usage: check_launchers.py OUT_DIR PORT.

Each worker writes OUT_DIR/<tag>.<rank> (JSON); the expected failure is written to
OUT_DIR/failure.txt. Prints CHECK-LAUNCHERS-OK at the end.
"""

from __future__ import annotations

import json
import os
import sys

out, port = sys.argv[1], sys.argv[2]


def report(tag):
    import torch

    from drivetrain import PartialState

    state = PartialState()
    total = state.collectives.all_reduce(torch.tensor([1.0]), "sum").item()
    with open(os.path.join(out, f"{tag}.{state.process_index}"), "w") as handle:
        json.dump([state.num_processes, state.distributed_type.value, total, state.mixed_precision,
                   state.fork_launched, os.environ.get("ACCELERATE_MIXED_PRECISION")], handle)


def fail():
    from drivetrain import PartialState

    state = PartialState()
    if state.process_index == 1:
        raise RuntimeError("worker one fails on purpose")
    state.wait_for_everyone()


if __name__ == "__main__":
    from drivetrain import LaunchError, PartialState, debug_launcher, notebook_launcher

    PartialState()  # a single-process state in the parent does not leak into the workers
    debug_launcher(report, ("debug", ))
    notebook_launcher(report, ("notebook",), num_processes=2, mixed_precision="bf16", use_port=port)
    try:
        debug_launcher(fail)
    except LaunchError as error:
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

        # also torch's error, which Accelerate lets through: code written for it catches it
        assert isinstance(error, ChildFailedError) and error.failures, type(error).__mro__
        with open(os.path.join(out, "failure.txt"), "w") as handle:
            handle.write(str(error))
    else:
        raise AssertionError("debug_launcher did not report the failing worker")
    notebook_launcher(report, ("single",))  # one process: runs right here
    with open(os.path.join(out, "parent-env.json"), "w") as handle:
        json.dump({"ACCELERATE_MIXED_PRECISION": os.environ.get("ACCELERATE_MIXED_PRECISION")}, handle)
    print("CHECK-LAUNCHERS-OK", flush=True)
