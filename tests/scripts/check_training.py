"""Launched on 2 processes: the training step across real processes (DDP over gloo).

Each check builds a reference in this same process (the same model trained on the whole
batch, without distribution) and compares. Prints CHECK-TRAINING-OK at the end.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings

import torch

from drivetrain import Accelerator, GradScalerKwargs, LocalSGD, ProfileKwargs
from drivetrain.state import AcceleratorState, GradientState

torch.set_num_threads(1)
FEATURES, BATCH = 6, 8  # BATCH per process


def fresh_accelerator(**kwargs) -> Accelerator:
    AcceleratorState._reset_state()
    GradientState._reset_state()
    return Accelerator(**kwargs)


def make(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def data(step: int, world: int):
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH * world, FEATURES, generator=generator)
    return x, x.sum(dim=1, keepdim=True).sin()


def reference_run(steps: int, world: int, accumulation: int = 1):
    model, optimizer = make()
    for step in range(steps):
        optimizer.zero_grad()
        xs, ys = zip(*(data(step * accumulation + k, world) for k in range(accumulation)))
        torch.nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
        optimizer.step()
    return model


def check_ddp_matches_one_process_on_the_combined_batch(steps: int = 5) -> None:
    accelerator = fresh_accelerator()
    world, rank = accelerator.num_processes, accelerator.process_index
    assert world == 2 and accelerator.distributed_type == "MULTI_CPU", accelerator.distributed_type
    model, optimizer = accelerator.prepare(*make())
    assert type(model).__name__ == "DistributedDataParallel"
    for step in range(steps):
        x, y = data(step, world)
        share = slice(rank * BATCH, (rank + 1) * BATCH)
        accelerator.backward(torch.nn.functional.mse_loss(model(x[share]), y[share]))
        optimizer.step()
        optimizer.zero_grad()
    reference = reference_run(steps, world)
    for mine, theirs in zip(accelerator.unwrap_model(model).parameters(), reference.parameters()):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)


def check_parameter_of_no_model(steps: int = 3) -> None:
    """An optimizer over a standalone parameter, and backward with no prepared model (allowed, as
    in Accelerate): nothing synchronises it, so each process follows plain torch on its share."""
    accelerator = fresh_accelerator()
    world, rank = accelerator.num_processes, accelerator.process_index
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(FEATURES, 1, device=accelerator.device))
    reference = weight.detach().clone().requires_grad_(True)
    optimizer = accelerator.prepare(torch.optim.SGD([weight], lr=0.05))
    plain = torch.optim.SGD([reference], lr=0.05)
    share = slice(rank * BATCH, (rank + 1) * BATCH)
    for step in range(steps):
        x, y = (t[share].to(accelerator.device) for t in data(step, world))
        accelerator.backward(torch.nn.functional.mse_loss(x @ weight, y))
        optimizer.step()
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(x @ reference, y).backward()
        plain.step()
        plain.zero_grad()
    torch.testing.assert_close(weight.detach(), reference.detach())
    weights = accelerator.gather(weight.detach()[None])
    assert not torch.equal(weights[0], weights[1])  # trained on each process's own share


def check_accumulation_of_4_matches_one_step_of_4x(steps: int = 2) -> None:
    accelerator = fresh_accelerator(gradient_accumulation_steps=4)
    world, rank = accelerator.num_processes, accelerator.process_index
    model, optimizer = accelerator.prepare(*make())
    synced = []
    for step in range(steps * 4):
        x, y = data(step, world)
        share = slice(rank * BATCH, (rank + 1) * BATCH)
        with accelerator.accumulate(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(x[share]), y[share]))
            if not accelerator.sync_gradients:
                # no_sync really skipped the all-reduce: the gradients still differ by rank
                grads = accelerator.gather(next(model.parameters()).grad.flatten()[None])
                assert not torch.allclose(grads[0], grads[1])
            optimizer.step()
            optimizer.zero_grad()
        synced.append(accelerator.sync_gradients)
    assert synced == [False, False, False, True] * steps, synced
    reference = reference_run(steps, world, accumulation=4)
    for mine, theirs in zip(accelerator.unwrap_model(model).parameters(), reference.parameters()):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)


def check_mixed_precision(precision: str) -> None:
    accelerator = fresh_accelerator(mixed_precision=precision)
    world, rank = accelerator.num_processes, accelerator.process_index
    model, optimizer = accelerator.prepare(*make())
    for step in range(5):
        x, y = data(step, world)
        share = slice(rank * BATCH, (rank + 1) * BATCH)
        out = model(x[share])
        assert out.dtype == torch.float32
        accelerator.backward(torch.nn.functional.mse_loss(out, y[share]))
        optimizer.step()
        optimizer.zero_grad()
    reference = reference_run(5, world)
    for mine, theirs in zip(accelerator.unwrap_model(model).parameters(), reference.parameters()):
        torch.testing.assert_close(mine, theirs, rtol=5e-2, atol=5e-2)
    gathered = accelerator.gather(torch.cat([p.detach().flatten() for p in model.parameters()])[None])
    assert torch.equal(gathered[0], gathered[1]), "replicas diverged"


def check_fp16_skipped_step_is_reported() -> None:
    accelerator = fresh_accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=2.0**100)])
    model, optimizer = accelerator.prepare(*make())
    before = [p.detach().clone() for p in model.parameters()]
    accelerator.backward(model(torch.randn(BATCH, FEATURES)).sum() * 1e4)
    optimizer.step()
    assert accelerator.optimizer_step_was_skipped
    assert all(torch.equal(a, b) for a, b in zip(before, accelerator.unwrap_model(model).parameters()))


def check_trigger_sync_in_backward() -> None:
    accelerator = fresh_accelerator()
    model, optimizer = accelerator.prepare(*make())
    rank = accelerator.process_index
    x = torch.randn(BATCH, FEATURES, generator=torch.Generator().manual_seed(rank))
    with accelerator.no_sync(model):
        loss = model(x).sum()  # forward without synchronisation, as in Accelerate's usage
        with accelerator.trigger_sync_in_backward(model):
            accelerator.backward(loss)
    grads = accelerator.gather(next(model.parameters()).grad.flatten()[None])
    torch.testing.assert_close(grads[0], grads[1])


def check_triggers_local_sgd_and_join() -> None:
    accelerator = fresh_accelerator()
    rank = accelerator.process_index
    if rank == 1:
        accelerator.set_trigger()
    assert accelerator.check_trigger() and not accelerator.check_trigger()
    model, optimizer = accelerator.prepare(*make())
    with LocalSGD(accelerator, model, local_sgd_steps=3) as local_sgd:
        for step in range(6):
            x = torch.randn(BATCH, FEATURES, generator=torch.Generator().manual_seed(rank * 100 + step))
            accelerator.backward(model(x).pow(2).mean())
            optimizer.step()
            optimizer.zero_grad()
            local_sgd.step()
            flat = torch.cat([p.detach().flatten() for p in model.parameters()])[None]
            gathered = accelerator.gather(flat)
            assert torch.equal(gathered[0], gathered[1]) == (step % 3 == 2), step
    # uneven inputs: rank 1 has one batch fewer; Join shadows its missing all-reduce
    batches = 3 if rank == 0 else 2
    with accelerator.join_uneven_inputs([model]):
        for _ in range(batches):
            accelerator.backward(model(torch.randn(BATCH, FEATURES)).sum())
            optimizer.step()
            optimizer.zero_grad()
    check_join_warnings(accelerator, model)


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield from torch.arange(6)


def check_join_warnings(accelerator: Accelerator, model: torch.nn.Module) -> None:
    """Overriding even_batches cannot reach an iterable dataset's loader, and Join does not
    apply to a run reported as a sharding strategy's: a warning with Accelerate's words each."""
    from drivetrain import DistributedType

    accelerator.prepare(torch.utils.data.DataLoader(_Stream(), batch_size=1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with accelerator.join_uneven_inputs([model], even_batches=False):
            pass
    assert "only supported for map-style datasets" in str(caught[-1].message), [str(w.message) for w in caught]
    assert accelerator.even_batches  # restored after the block
    original = accelerator.state.distributed_type
    accelerator.state.distributed_type = DistributedType.FSDP  # scripts assign it, as in Accelerate
    assert accelerator.distributed_type == DistributedType.FSDP
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with accelerator.join_uneven_inputs([object()]):  # no Joinable: refused under data parallel
            pass
    assert "only supported for multi-GPU" in str(caught[-1].message), [str(w.message) for w in caught]
    accelerator.state.distributed_type = original
    assert accelerator.distributed_type == original


def check_comm_hooks_and_static_graph() -> None:
    from drivetrain import DistributedDataParallelKwargs

    from drivetrain.errors import ConfigError

    try:
        fresh_accelerator(kwargs_handlers=[DistributedDataParallelKwargs(comm_hook="bf16")]).prepare(*make())
        raise AssertionError("a bf16 comm hook on gloo was accepted")
    except ConfigError as error:
        assert "needs the nccl backend" in str(error)
    power_sgd = DistributedDataParallelKwargs(comm_hook="power_sgd", comm_state_option={"matrix_approximation_rank": 1,
                                                                                       "start_powerSGD_iter": 2})
    if torch.cuda.is_available():  # torch's PowerSGD hook cannot run on CPU tensors there
        try:
            fresh_accelerator(kwargs_handlers=[power_sgd]).prepare(*make())
            raise AssertionError("power_sgd on CPU processes of a CUDA machine was accepted")
        except ConfigError as error:
            assert "CUDA_VISIBLE_DEVICES" in str(error)
    for options in (DistributedDataParallelKwargs(comm_hook="fp16"),
                    *(() if torch.cuda.is_available() else (power_sgd,)),
                    DistributedDataParallelKwargs(static_graph=True)):
        accelerator = fresh_accelerator(kwargs_handlers=[options])
        world, rank = accelerator.num_processes, accelerator.process_index
        model, optimizer = accelerator.prepare(*make())
        assert getattr(model, "static_graph", False) == options.static_graph
        for step in range(3):
            x, y = data(step, world)
            share = slice(rank * BATCH, (rank + 1) * BATCH)
            accelerator.backward(torch.nn.functional.mse_loss(model(x[share]), y[share]))
            optimizer.step()
            optimizer.zero_grad()
        reference = reference_run(3, world)
        for mine, theirs in zip(accelerator.unwrap_model(model).parameters(), reference.parameters()):
            torch.testing.assert_close(mine, theirs, rtol=2e-2, atol=2e-2)


def check_save_profile_and_logging(directory: str) -> None:
    import logging

    from drivetrain import get_logger

    logging.basicConfig(format="%(message)s", level=logging.INFO)
    accelerator = fresh_accelerator()
    rank = accelerator.process_index
    path = os.path.join(directory, "saved.pt")
    accelerator.save({"rank": rank}, path)
    accelerator.wait_for_everyone()
    assert torch.load(path)["rank"] == 0  # only the main process wrote
    with accelerator.profile(ProfileKwargs(output_trace_dir=directory)):
        torch.ones(8) + 1
    accelerator.wait_for_everyone()
    assert os.path.exists(os.path.join(directory, f"profile_{rank}.json"))
    logger = get_logger("check", log_level="INFO")
    logger.info(f"LOG-MAIN-ONLY from {rank}")
    logger.info(f"LOG-EVERYWHERE from {rank}", main_process_only=False, in_order=True)


def check_checkpoint_commit_across_processes(directory: str) -> None:
    """Both processes' files are synced before the publish; one process's sync failure fails both."""
    import errno
    import json

    from drivetrain.checkpointing import commit
    from drivetrain.errors import CheckpointError

    accelerator = fresh_accelerator()
    model, optimizer = accelerator.prepare(*make())
    path = os.path.join(directory, "commit")
    accelerator.save_state(path)
    accelerator.wait_for_everyone()
    manifest = json.load(open(os.path.join(path, "manifest.json")))
    assert {"random_states_0.json", "random_states_1.json"} <= set(manifest["files"]), manifest["files"]
    assert not [name for name in os.listdir(path) if name.startswith(".")]  # markers are gone
    saved = [p.detach().clone() for p in model.parameters()]

    real = commit._fsync_path
    if accelerator.process_index == 1:
        def failing(path, directory=False):
            raise OSError(errno.EIO, "Input/output error")

        commit._fsync_path = failing
    try:
        accelerator.save_state(path)  # the commit runs before save_state returns: it fails there, on both
        accelerator.wait_for_everyone()
        raise AssertionError("a failed sync on rank 1 was not reported")
    except CheckpointError as error:  # on both processes, naming the process that failed
        assert "rank 1" in str(error) and "Input/output error" in str(error), error
        if accelerator.process_index == 0:
            assert "process 1 could not sync its files" in str(error), error
    finally:
        commit._fsync_path = real
    assert not [name for name in os.listdir(directory) if name.startswith(".tmp-")]
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
    accelerator.load_state(path)  # the previous checkpoint is intact
    assert all(torch.equal(a, b) for a, b in zip(saved, model.parameters()))


def check_checkpoint_directories_must_agree(directory: str) -> None:
    """Each process passing its own directory (a mkdtemp() per process) fails every process at once."""
    from drivetrain.errors import CheckpointError

    accelerator = fresh_accelerator()
    accelerator.prepare(*make())
    own = tempfile.mkdtemp(dir=directory)
    for name, action in (("save_state", accelerator.save_state), ("load_state", accelerator.load_state)):
        try:
            action(own)
            raise AssertionError(f"{name} into a different directory on each process was not refused")
        except CheckpointError as error:
            assert "different directory on each process" in str(error) and "rank 1" in str(error), error
    assert os.listdir(own) == []  # nothing was written


def main() -> None:
    directory = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
    check_ddp_matches_one_process_on_the_combined_batch()
    check_parameter_of_no_model()
    check_accumulation_of_4_matches_one_step_of_4x()
    check_mixed_precision("bf16")
    check_mixed_precision("fp16")
    check_fp16_skipped_step_is_reported()
    check_trigger_sync_in_backward()
    check_triggers_local_sgd_and_join()
    check_comm_hooks_and_static_graph()
    check_save_profile_and_logging(directory)
    check_checkpoint_commit_across_processes(directory)
    check_checkpoint_directories_must_agree(directory)
    accelerator = Accelerator()
    accelerator.wait_for_everyone()
    print(f"CHECK-TRAINING-OK rank {accelerator.process_index}", flush=True)


if __name__ == "__main__":
    main()
