"""Values inside a checkpoint are checked by type and range before anything is restored.

Our own format with its checksums re-recorded (as a forger would), and Accelerate's pickles
read through the safe loader: every damaged value is a one-line ``CheckpointError`` naming
the file and the field, and the model, optimizer, scheduler, loader and generators are left
as they were.
"""

from __future__ import annotations

import copy
import json
import os
import random
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from drivetrain import Accelerator
from drivetrain.checkpointing.checksums import file_digest
from drivetrain.errors import CheckpointError, ConfigError
from test_checkpoint_accelerate_layout import Counter, Opaque  # a registered object; a class a pickle names

pytestmark = pytest.mark.usefixtures("fresh_state")


def prepared():
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    loader = torch.utils.data.DataLoader(torch.randn(20, 3), batch_size=4, shuffle=True)
    net, optimizer, scheduler, loader = accelerator.prepare(net, optimizer, scheduler, loader)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    return accelerator, net, optimizer, scheduler, loader, counter


def train(accelerator, net, optimizer, scheduler, loader, batches=2):
    for number, batch in enumerate(loader):
        accelerator.backward(net(batch).square().mean())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if number + 1 == batches:
            break


def snapshot(net, optimizer, scheduler, loader):
    tensors = [p.detach().clone() for p in net.parameters()]
    tensors += [v.to_dense().clone() for state in optimizer.state.values() for v in state.values()
                if isinstance(v, torch.Tensor)]
    return (tensors, json.dumps(scheduler.state_dict()), repr(loader.state_dict()), torch.get_rng_state(),
            random.getstate(), repr(np.random.get_state()))


def same(before, after):
    return (len(before[0]) == len(after[0]) and all(torch.equal(a, b) for a, b in zip(before[0], after[0]))
            and before[1:3] == after[1:3] and torch.equal(before[3], after[3]) and before[4:] == after[4:])


def refused(run, directory, match):
    accelerator, net, optimizer, scheduler, loader, _counter = run
    before = snapshot(net, optimizer, scheduler, loader)
    with pytest.raises(CheckpointError, match=match) as caught:
        accelerator.load_state(str(directory))
    assert "\n" not in str(caught.value)
    assert same(before, snapshot(net, optimizer, scheduler, loader))


# ------------------------------------------------------------------ our own format, checksums re-recorded


def forge(directory: Path, name: str, change) -> None:
    """Change the tree of ``name``.json and record the file's new checksum and size."""
    path = directory / f"{name}.json"
    document = json.loads(path.read_text())
    change(document["tree"])
    path.write_text(json.dumps(document))
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["checksums"][path.name] = file_digest(path)
    manifest["sizes"][path.name] = path.stat().st_size
    (directory / "manifest.json").write_text(json.dumps(manifest))


def saved_run(tmp_path):
    run = prepared()
    train(*run[:5])
    directory = Path(run[0].save_state(tmp_path / "c"))
    train(*run[:5], batches=1)  # move away from what was saved
    return run, directory


def _python_words(tree):
    return tree["python"]["v"][1]["v"]


@pytest.mark.parametrize("name, change, match", [
    ("random_states_0", lambda t: t["numpy"]["v"].__setitem__(2, 10 ** 6), r"random_states_0\.json.*numpy random state's pos"),
    ("random_states_0", lambda t: t["numpy"]["v"].__setitem__(2, -1), "numpy random state's pos"),
    ("random_states_0", lambda t: t["numpy"]["v"].__setitem__(0, "PCG64"), "numpy random state's generator"),
    ("random_states_0", lambda t: _python_words(t).__setitem__(5, 2 ** 70), "Python random state's word 5"),
    ("random_states_0", lambda t: _python_words(t).pop(), "Python random state's words"),
    ("random_states_0", lambda t: _python_words(t).__setitem__(624, 10 ** 6), "Python random state's position"),
    ("accelerator", lambda t: t.__setitem__("step", "abc"), r"accelerator\.json is damaged: step is 'abc'"),
    ("accelerator", lambda t: t.__setitem__("step", -4), "step is -4"),
    ("scheduler_0", lambda t: t.__setitem__("step_size", "abc"), r"scheduler_0 is damaged: \['step_size'\] is 'abc'"),
    ("dataloader_0", lambda t: t.__setitem__("batches_yielded", -3), "batches_yielded is -3"),
    ("dataloader_0", lambda t: t.__setitem__("epoch", -1), "epoch is -1"),
    ("dataloader_0", lambda t: t.__setitem__("num_processes", "two"), "num_processes is 'two'"),
    ("dataloader_0", lambda t: t.__setitem__("seed", "abc"), "seed is 'abc'"),
    ("dataloader_0", lambda t: t.update(batches_yielded=40, samples_yielded=160), "past the end of this loader's epoch"),
    ("dataloader_0", lambda t: t["draws"].__setitem__("loader", "abc"), "its draws are damaged"),
    ("dataloader_0", lambda t: (t.clear(), t.update(_num_yielded=2, _sampler_iter_yielded=2, _snapshot={})),
     "StatefulDataLoader's state"),
])
def test_a_forged_value_is_refused_naming_file_and_field_and_nothing_changes(tmp_path, name, change, match):
    run, directory = saved_run(tmp_path)
    forge(directory, name, change)
    refused(run, directory, f"{name}.*{match}" if name not in match else match)


# ------------------------------------------------------------------ Accelerate's layout, through the safe loader


def accelerate_checkpoint(directory: Path, run, rng=None, optimizer_state=None, scheduler_state=None,
                          loader_state=None) -> Path:
    """The files Accelerate's save_state writes for one process, written with plain torch."""
    from safetensors.torch import save_file

    accelerator, net, optimizer, scheduler, _loader, counter = run
    directory.mkdir()
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, directory / "model.safetensors",
              metadata={"format": "pt"})
    torch.save(optimizer_state or optimizer.state_dict(), directory / "optimizer.bin")
    torch.save(scheduler_state or scheduler.state_dict(), directory / "scheduler.bin")
    torch.save(counter.state_dict(), directory / "custom_checkpoint_0.pkl")
    if loader_state is not None:
        torch.save(loader_state, directory / "dl_state_dict.bin")
    states = {"step": 3, "random_state": random.getstate(), "numpy_random_seed": np.random.get_state(),
              "torch_manual_seed": torch.get_rng_state()}
    states.update(rng or {})
    torch.save(states, directory / "random_states_0.pkl")
    return directory


def _numpy_state(**change):
    name, key, position, has_gauss, cached = np.random.get_state()
    fields = dict(name=name, key=key, position=position, has_gauss=has_gauss, cached=cached)
    fields.update(change)
    return tuple(fields.values())


def _python_state(word=None, words=625):
    version, state, gauss = random.getstate()
    state = list(state)[:words]
    if word is not None:
        state[7] = word
    return (version, tuple(state), gauss)


@pytest.mark.parametrize("rng, match", [
    ({"numpy_random_seed": _numpy_state(position=10 ** 6)}, "numpy random state's pos is 1000000"),
    ({"numpy_random_seed": _numpy_state(key=np.zeros(600, dtype=np.uint32))}, "numpy random state's key"),
    ({"numpy_random_seed": _numpy_state(key=np.zeros(700, dtype=np.uint32))}, "numpy random state's key"),
    ({"random_state": _python_state(word=2 ** 70)}, "Python random state's word 7"),
    ({"random_state": _python_state(words=100)}, "Python random state's words"),
    ({"step": "abc"}, r" \(its 'step'\) is damaged: step is 'abc'"),
])
def test_forged_generator_states_and_step_in_an_accelerate_checkpoint_are_refused(tmp_path, rng, match):
    run = prepared()
    train(*run[:5])
    directory = accelerate_checkpoint(tmp_path / "acc", run, rng=rng)
    refused(run, directory, f"random_states_0.pkl.*{match}")


def test_a_sparse_optimizer_tensor_and_a_forged_scheduler_value_are_refused(tmp_path):
    run = prepared()
    accelerator, net, optimizer, scheduler, loader, _counter = run
    train(*run[:5])
    state = copy.deepcopy(optimizer.state_dict())  # its per-parameter dicts are the optimizer's own
    # indices far past the tensor's size: torch.load does not check them, a later add reads out of bounds
    forged = torch.sparse_coo_tensor(torch.tensor([[100], [100]]), torch.ones(1), (4, 3), check_invariants=False)
    state["state"][0]["exp_avg"] = forged
    directory = accelerate_checkpoint(tmp_path / "sparse", run, optimizer_state=state)
    refused(run, directory, r"optimizer\.bin does not fit: state\[0\]\['exp_avg'\] is \(4, 3\) float32 sparse_coo")
    # a sparse tensor where the optimizer holds one too: its indices are checked
    for parameter_state in optimizer.state.values():
        parameter_state["exp_avg"] = parameter_state["exp_avg"].to_sparse()
    directory = accelerate_checkpoint(tmp_path / "sparse_too", run, optimizer_state=state)
    refused(run, directory, r"optimizer\.bin is damaged: state\[0\]\['exp_avg'\] is a sparse tensor that cannot")
    state = copy.deepcopy(optimizer.state_dict())
    state["state"][0]["step"] = "abc"
    directory = accelerate_checkpoint(tmp_path / "step", run, optimizer_state=state)
    refused(run, directory, r"optimizer\.bin is damaged: state\[0\]\['step'\] is 'abc'")
    schedule = dict(scheduler.state_dict(), step_size="abc")
    directory = accelerate_checkpoint(tmp_path / "schedule", run, scheduler_state=schedule)
    refused(run, directory, r"scheduler\.bin is damaged: \['step_size'\] is 'abc'")


# ------------------------------------------------------------------ a loader state of another kind changes nothing


def test_a_stateful_loader_state_for_a_plain_loader_is_refused_before_anything_changes(tmp_path):
    from torchdata.stateful_dataloader import StatefulDataLoader

    run = prepared()
    train(*run[:5])
    stateful = StatefulDataLoader(torch.randn(20, 3), batch_size=4)
    iterator = iter(stateful)
    next(iterator)
    directory = accelerate_checkpoint(tmp_path / "acc", run, loader_state=stateful.state_dict())
    refused(run, directory, r"dl_state_dict\.bin cannot be loaded into data loader: .*StatefulDataLoader's state")
    damaged = dict(run[4].state_dict(), seed="abc")
    directory = accelerate_checkpoint(tmp_path / "damaged", run, loader_state=damaged)
    refused(run, directory, r"dl_state_dict\.bin cannot be loaded into data loader: its seed is 'abc'")


# ------------------------------------------------------------------ no wait, no dangerous advice


@pytest.mark.parametrize("name", ["optimizer.bin", "model.safetensors"])
def test_a_checkpoint_file_that_is_a_fifo_is_refused_at_once(tmp_path, name):
    run = prepared()
    directory = accelerate_checkpoint(tmp_path / "acc", run)
    (directory / name).unlink()
    os.mkfifo(directory / name)
    outcome = []

    def load():
        try:
            run[0].load_state(str(directory))
        except CheckpointError as error:
            outcome.append(str(error))

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(timeout=30)
    if reader.is_alive():  # waits for a writer: give it one that closes at once, so the thread ends
        os.close(os.open(directory / name, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=30)
        pytest.fail("load_state waited on a FIFO")
    assert outcome and f"{name} is not a regular file" in outcome[0]


def test_a_refused_pickle_names_the_global_and_never_advises_turning_safety_off(tmp_path):
    run = prepared()
    directory = accelerate_checkpoint(tmp_path / "acc", run)
    torch.save({"count": Opaque()}, directory / "custom_checkpoint_0.pkl")
    with pytest.raises(CheckpointError) as caught:
        run[0].load_state(str(directory))
    message = str(caught.value)
    assert "custom_checkpoint_0.pkl" in message and f"{Opaque.__module__}.Opaque" in message and "for safety" in message
    assert "weights_only" not in message and "will likely succeed" not in message
    assert "\x1b" not in message and "\n" not in message


# ------------------------------------------------------------------ skipping batches


@pytest.mark.parametrize("count", [-3, 2.5, True, "2"])
def test_skip_first_batches_takes_only_a_whole_number(count):
    accelerator, _net, _optimizer, _scheduler, loader, _counter = prepared()
    for target in (loader, torch.utils.data.DataLoader(list(range(8)), batch_size=2)):
        with pytest.raises(ConfigError, match=r"skip_first_batches\(num_batches=.*\) takes a whole number"):
            accelerator.skip_first_batches(target, count)


# ------------------------------------------------------------------ a loader state of another shape


def stateful_run(batch_size):
    from drivetrain.state import AcceleratorState, GradientState
    from drivetrain.utils import DataLoaderConfiguration

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    net = torch.nn.Linear(1, 1)
    net, loader = accelerator.prepare(net, torch.utils.data.DataLoader(torch.arange(20.0), batch_size=batch_size))
    return accelerator, net, loader


def test_a_stateful_position_is_refused_over_another_batch_size_and_resumes_over_the_same(tmp_path):
    accelerator, _net, loader = stateful_run(4)
    iterator = iter(loader)
    seen = [next(iterator).tolist() for _ in range(2)]
    directory = accelerator.save_state(tmp_path / "c")
    accelerator, net, loader = stateful_run(2)
    weights = [p.detach().clone() for p in net.parameters()]
    with pytest.raises(CheckpointError, match=r"dataloader_0 was saved mid-epoch with 4 samples per batch .*takes 2"):
        accelerator.load_state(directory)
    assert all(torch.equal(a, b) for a, b in zip(weights, net.parameters()))
    accelerator, _net, loader = stateful_run(4)
    accelerator.load_state(directory)
    rest = [value for batch in loader for value in batch.tolist()]
    assert sorted([value for batch in seen for value in batch] + rest) == [float(n) for n in range(20)]


def test_a_stateful_position_saved_by_two_processes_is_refused_on_one(tmp_path):
    accelerator, _net, loader = stateful_run(4)
    iterator = iter(loader)
    next(iterator)
    directory = Path(accelerator.save_state(tmp_path / "c"))
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["world_size"] = 2  # as two processes wrote it (the manifest carries no checksum of its own)
    (directory / "manifest.json").write_text(json.dumps(manifest))
    accelerator, _net, loader = stateful_run(4)
    with pytest.raises(CheckpointError, match=r"saved mid-epoch by 2 processes .*cannot resume that epoch on 1"):
        accelerator.load_state(directory)


def test_a_checkpoint_of_one_loader_is_refused_by_a_run_with_two(tmp_path):
    from drivetrain.state import AcceleratorState, GradientState

    accelerator, *_rest = prepared()
    directory = accelerator.save_state(tmp_path / "c")
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    accelerator, net, optimizer, scheduler, loader, _counter = prepared()
    accelerator.prepare(torch.utils.data.DataLoader(list(range(8)), batch_size=2))
    with pytest.raises(CheckpointError, match=r"dataloaders: checkpoint 1, prepared 2"):
        accelerator.load_state(directory)


def test_a_position_saved_over_another_dataset_is_refused_mid_epoch(tmp_path):
    from drivetrain.state import AcceleratorState, GradientState

    def run(samples):
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
        accelerator = Accelerator(cpu=True)
        return accelerator, accelerator.prepare(torch.utils.data.DataLoader(list(range(samples)), batch_size=10))

    accelerator, loader = run(100)
    iterator = iter(loader)
    next(iterator), next(iterator)
    directory = accelerator.save_state(tmp_path / "c")
    accelerator, loader = run(30)
    with pytest.raises(CheckpointError, match=r"saved over 100 samples and this loader has 30"):
        accelerator.load_state(directory)
    accelerator, loader = run(100)
    accelerator.load_state(directory)
    assert [value for batch in loader for value in batch.tolist()] == list(range(20, 100))
