"""The script ``drivetrain test`` launches on every process of a job.

Each process checks that it knows its place (ranks, device, the same choice of plugins as the
others), that the collectives work, that the process-control helpers behave, and that one
training step through the ``Accelerator`` keeps the replicas identical. A failed check raises,
so ``drivetrain launch`` names the rank and the check.
"""

from __future__ import annotations

import sys


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(f"self-test: {what}")


def check_processes(state) -> None:
    import torch

    n, rank = state.num_processes, state.process_index
    views = state.collectives.all_gather_object(
        (rank, state.local_process_index, str(state.distributed_type), state.run.selection.platform.name,
         state.mixed_precision))
    _check([view[0] for view in views] == list(range(n)), f"ranks are {[v[0] for v in views]}, not 0..{n - 1}")
    _check(len({view[2:] for view in views}) == 1, f"processes disagree on the run's choice: {views}")
    _check(state.is_main_process == (rank == 0) and state.is_last_process == (rank == n - 1), "main/last flags")
    total = state.collectives.all_reduce(torch.tensor([rank + 1.0], device=state.device), "sum")
    _check(total.item() == n * (n + 1) / 2, f"all_reduce gave {total.item()}, expected {n * (n + 1) / 2}")
    value = torch.tensor([42.0 if rank == 0 else -1.0], device=state.device)
    _check(state.collectives.broadcast(value, 0).item() == 42.0, "broadcast from rank 0")
    with state.split_between_processes(list(range(2 * n + 1))) as share:
        shares = state.collectives.all_gather_object(share)
    _check(sorted(x for part in shares for x in part) == list(range(2 * n + 1)), "split_between_processes")
    order = []
    with state.main_process_first():
        order.append(rank)
    state.wait_for_everyone()
    ran = []
    state.on_main_process(lambda: ran.append("main"))()
    state.on_last_process(lambda: ran.append("last"))()
    _check(("main" in ran) == state.is_main_process and ("last" in ran) == state.is_last_process,
           "on_main_process/on_last_process")


def check_training(state) -> None:
    import torch

    from drivetrain import Accelerator

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    accelerator = Accelerator()
    model, optimizer = accelerator.prepare(model, optimizer)
    inputs = torch.randn(8, 4, device=accelerator.device) * (accelerator.process_index + 1)
    loss = model(inputs).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    weights = accelerator.unwrap_model(model).weight.detach().flatten().cpu()
    replicas = state.collectives.all_gather_object(weights.tolist())
    _check(all(r == replicas[0] for r in replicas), "replicas differ after one training step")


def main() -> int:
    from drivetrain.state import PartialState

    state = PartialState()
    if state.is_main_process:
        print(f"drivetrain self-test: {state.num_processes} process(es), {state.distributed_type}, "
              f"platform {state.run.selection.platform.name}, mixed precision {state.mixed_precision}", flush=True)
    check_processes(state)
    state.print("  processes, collectives and helpers: ok", flush=True)
    check_training(state)
    state.print("  one training step, replicas identical: ok", flush=True)
    state.wait_for_everyone()
    state.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
