"""The script ``drivetrain test`` launches on every process of a job.

Each process checks that it knows its place (ranks, device, the same choice of plugins as the
others), that the collectives work, that the process-control helpers behave, and that one
training step through the ``Accelerator`` keeps the replicas identical. A failed check raises,
so ``drivetrain launch`` names the rank and the check.
"""

from __future__ import annotations

import sys
import time


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(f"self-test: {what}")


def check_processes(state) -> None:
    import torch

    n, rank = state.num_processes, state.process_index
    views = state.collectives.all_gather_object(
        (rank, state.local_process_index, state.distributed_type.value, state.run.selection.platform.name,
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
    spans = []
    for first, label in ((state.main_process_first, "main"), (state.local_main_process_first, "local main")):
        with first():
            entered = time.monotonic()
            if state.is_main_process if label == "main" else state.is_local_main_process:
                time.sleep(0.05)  # long enough that another process entering too early is caught
            spans.append((entered, time.monotonic()))
    views = state.collectives.all_gather_object((_clock_id(), state.is_main_process, state.is_local_main_process,
                                                 spans))
    check_goes_first(views)
    ran = []
    state.on_main_process(lambda: ran.append("main"))()
    state.on_last_process(lambda: ran.append("last"))()
    _check(("main" in ran) == state.is_main_process and ("last" in ran) == state.is_last_process,
           "on_main_process/on_last_process")


def _clock_id() -> str:
    """Processes with the same id read the same ``time.monotonic`` clock: one running kernel
    (its boot id, where the system has one) and one host name (containers on one kernel are
    told apart, as each goes first on its own)."""
    import socket

    try:
        with open("/proc/sys/kernel/random/boot_id") as file:
            boot = file.read().strip()
    except OSError:
        boot = ""
    return f"{boot}/{socket.gethostname()}"


def check_goes_first(views: list) -> None:
    """``main_process_first`` / ``local_main_process_first``: on every clock shared with the
    process that goes first, no other process entered the block before that one had left it.

    ``views`` holds each process's ``(clock id, is main, is local main, [(entered, left)] of the
    main-first block, then of the local-main-first block)``.
    """
    for block, label in ((0, "main_process_first"), (1, "local_main_process_first")):
        for clock, is_main, is_local_main, spans in views:
            first = is_main if block == 0 else is_local_main
            if not first:
                continue
            left = spans[block][1]
            for other_clock, other_main, other_local_main, other_spans in views:
                other_first = other_main if block == 0 else other_local_main
                if other_clock == clock and not other_first:
                    entered = other_spans[block][0]
                    _check(entered >= left, f"{label}: a process entered the block {left - entered:.3f}s before "
                                            "the one that goes first had left it")


def check_training(state) -> None:
    import torch

    from ..facade.accelerator import Accelerator

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
    from drivetrain.runtime.state import PartialState

    state = PartialState()
    if state.is_main_process:
        print(f"drivetrain self-test: {state.num_processes} process(es), {state.distributed_type.value}, "
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
