"""Launched on 2 processes: every PartialState attribute and process-control helper, the
shared-state singletons, and what the launcher hands each child.

Usage: check_state.py OUT_DIR --expect-precision P --expect-debug 0|1 [--passthrough X]
Prints CHECK-STATE-OK <rank> at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from drivetrain import (
    AcceleratorState,
    DistributedType,
    GradientState,
    InitProcessGroupKwargs,
    PartialState,
)
from drivetrain import environment

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--expect-precision", default="no")
parser.add_argument("--expect-debug", type=int, default=0)
parser.add_argument("--passthrough")
options = parser.parse_args()
out = Path(options.out)

state = PartialState(**InitProcessGroupKwargs(backend="gloo", timeout=timedelta(seconds=60)).to_kwargs())
rank = state.process_index
gather = state.collectives.all_gather_object


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(f"rank {rank}: {what}")


# ----------------------------------------------------------------- attributes
check(PartialState().__dict__ is state.__dict__, "PartialState is not a shared-state singleton")
check(state.num_processes == 2 == int(os.environ["WORLD_SIZE"]), f"num_processes {state.num_processes}")
check(rank == int(os.environ["RANK"]), "process_index differs from RANK")
check(state.local_process_index == int(os.environ["LOCAL_RANK"]), "local_process_index differs from LOCAL_RANK")
check(state.device == torch.device("cpu"), f"device {state.device}")
check(state.distributed_type == DistributedType.MULTI_CPU == "MULTI_CPU", f"distributed_type {state.distributed_type}")
check(state.distributed_type is DistributedType.MULTI_CPU, "distributed_type is not the enum member")
check(state.backend == "gloo", f"backend {state.backend}")
check(state.use_distributed and dist.is_initialized(), "no process group")
check(state.is_main_process == (rank == 0), "is_main_process")
check(state.is_local_main_process == (state.local_process_index == 0), "is_local_main_process")
check(state.is_last_process == (rank == 1), "is_last_process")
check(state.mixed_precision == options.expect_precision, f"mixed_precision {state.mixed_precision}")
check(state.debug == bool(options.expect_debug), f"debug {state.debug}")
check(state.num_machines == 1, f"num_machines {state.num_machines}")
check("Num processes: 2" in repr(state), "repr")
state.set_device()

# The launcher resolved the choice once and handed it to every child (with Accelerate's names).
check(os.environ["DRIVETRAIN_PLATFORM"] == "cpu", "DRIVETRAIN_PLATFORM not passed")
check(os.environ["ACCELERATE_MIXED_PRECISION"] == options.expect_precision, "ACCELERATE_MIXED_PRECISION not in step")
check(environment.read_int("GRADIENT_ACCUMULATION_STEPS") == 3, "gradient accumulation steps not passed")
check(sys.argv[1:] == [options.out, "--expect-precision", options.expect_precision, "--expect-debug",
                       str(options.expect_debug), "--passthrough", "x y"], f"script arguments {sys.argv[1:]}")
views = gather((state.run.selection.platform.name, state.distributed_type.value, state.mixed_precision))
check(views[0] == views[1], f"ranks disagree on the run's choice: {views}")

# ------------------------------------------------------------- coordination
marker = out / "slow-main-done"
if state.is_main_process:
    time.sleep(0.5)
    marker.write_text("done")
state.wait_for_everyone()
check(marker.exists(), "wait_for_everyone returned before the main process got there")

for name, context in (("main", state.main_process_first), ("local", state.local_main_process_first)):
    log = out / f"{name}-first.log"
    with context():
        if rank == 0:
            time.sleep(0.3)
        with open(log, "a") as handle:
            handle.write(f"{rank}\n")
    state.wait_for_everyone()
    check(log.read_text().split() == ["0", "1"], f"{name}_process_first order: {log.read_text().split()}")

ran: list[str] = []


@state.on_main_process
def on_main():
    ran.append("main")


@state.on_local_main_process
def on_local_main():
    ran.append("local_main")


@state.on_last_process
def on_last():
    ran.append("last")


@state.on_process(process_index=1)
def on_one():
    ran.append("process1")


@state.on_local_process(local_process_index=1)
def on_local_one():
    ran.append("local1")


for function in (on_main, on_local_main, on_last, on_one, on_local_one):
    function()
state.on_process(lambda: ran.append("direct0"), process_index=0)()
everyone = gather(ran)
check(everyone == [["main", "local_main", "direct0"], ["last", "process1", "local1"]], f"decorators ran: {everyone}")

state.print(f"PRINTED-BY-RANK-{rank}", flush=True)

# ------------------------------------------------------ split_between_processes


class FakeDataset:
    """Quacks like datasets.Dataset: len() and select(indices)."""

    def __init__(self, rows):
        self.rows = list(rows)

    def __len__(self):
        return len(self.rows)

    def select(self, indices):
        return FakeDataset(self.rows[i] for i in indices)


def shares(inputs, padding=False):
    with state.split_between_processes(inputs, apply_padding=padding) as share:
        if isinstance(share, torch.Tensor):
            share = share.tolist()
        elif isinstance(share, FakeDataset):
            share = share.rows
        elif isinstance(share, dict):
            share = {k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in share.items()}
        return gather(share)


check(shares(["A", "B", "C"]) == [["A", "B"], ["C"]], "list")
check(shares(["A", "B", "C"], True) == [["A", "B"], ["C", "C"]], "list with padding")
check(shares(("a", "b", "c", "d")) == [("a", "b"), ("c", "d")], "tuple")
check(shares(torch.arange(5)) == [[0, 1, 2], [3, 4]], "tensor")
check(shares(torch.arange(5), True) == [[0, 1, 2], [3, 4, 4]], "tensor with padding")
check(shares({"x": [1, 2, 3], "y": torch.tensor([4, 5, 6])}, True)
      == [{"x": [1, 2], "y": [4, 5]}, {"x": [3, 3], "y": [6, 6]}], "dict")
check(shares(FakeDataset(range(3))) == [[0, 1], [2]], "datasets-like")
check(shares(FakeDataset(range(3)), True) == [[0, 1], [2, 2]], "datasets-like with padding")
check(shares(["only"]) == [["only"], ["only"]], "fewer inputs than processes")

# --------------------------------------------------------- the other singletons
accelerator_state = AcceleratorState()
check(accelerator_state.process_index == rank and accelerator_state.device == state.device, "AcceleratorState")
check(accelerator_state.distributed_type == DistributedType.MULTI_CPU, "AcceleratorState.distributed_type")
check(AcceleratorState().__dict__ is accelerator_state.__dict__, "AcceleratorState is not shared")
gradients = GradientState()
check(gradients.sync_gradients and not gradients.end_of_dataloader and gradients.remainder == -1,
      "GradientState defaults")
check((gradients.num_steps, gradients.adjust_scheduler, gradients.sync_with_dataloader) == (1, False, True),
      "GradientState plugin defaults")
check(gradients.active_dataloader is None and GradientState().__dict__ is gradients.__dict__, "GradientState shared")

state.wait_for_everyone()
print(f"CHECK-STATE-OK {rank}", flush=True)
state.destroy_process_group()
check(not dist.is_initialized(), "destroy_process_group left the group")
