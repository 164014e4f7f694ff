"""Checkpoints cross over: load_state reads Accelerate's layout; `drivetrain checkpoint export` writes it."""

from __future__ import annotations

import random

import numpy as np
import pytest
import safetensors.torch
import torch

from drivetrain import Accelerator
from drivetrain.errors import CheckpointError

pytestmark = pytest.mark.usefixtures("fresh_state")


class Counter:
    def __init__(self):
        self.count = 0

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]


class Opaque:
    """A class a pickle can name: reading it would run code."""


def prepared(seed, models=1):
    torch.manual_seed(seed)
    accelerator = Accelerator(cpu=True)
    nets = [torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.2), torch.nn.Linear(4, 2))
            for _ in range(models)]
    optimizer = torch.optim.AdamW([p for net in nets for p in net.parameters()], lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    objects = accelerator.prepare(*nets, optimizer, scheduler)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    return accelerator, list(objects[:models]), objects[models], objects[models + 1], counter


def step(accelerator, nets, optimizer, scheduler):
    loss = sum(net(torch.randn(5, 3)).square().mean() for net in nets)
    accelerator.backward(loss)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()


def write_accelerate_layout(directory, nets, optimizer, scheduler, counter, step_count, pickled_second_model=True):
    """The files Accelerate's save_state writes for one process, written with plain torch/safetensors."""
    directory.mkdir()
    for index, net in enumerate(nets):
        suffix = "" if index == 0 else f"_{index}"
        if index == 1 and pickled_second_model:
            torch.save(net.state_dict(), directory / f"pytorch_model{suffix}.bin")
        else:
            safetensors.torch.save_file(net.state_dict(), directory / f"model{suffix}.safetensors",
                                        metadata={"format": "pt"})
    torch.save(optimizer.state_dict(), directory / "optimizer.bin")
    torch.save(scheduler.state_dict(), directory / "scheduler.bin")
    torch.save(counter.state_dict(), directory / "custom_checkpoint_0.pkl")
    torch.save({"step": step_count, "random_state": random.getstate(), "numpy_random_seed": np.random.get_state(),
                "torch_manual_seed": torch.get_rng_state()}, directory / "random_states_0.pkl")


def test_load_state_resumes_an_accelerate_directory(tmp_path, caplog, monkeypatch):
    from drivetrain.services.checkpointing import accelerate_layout

    monkeypatch.setattr(accelerate_layout, "_warned_no_checksums", False)  # said once per process: maybe already
    accelerator, nets, optimizer, scheduler, counter = prepared(0, models=2)
    step(accelerator, nets, optimizer, scheduler)
    counter.count = 7
    random.seed(3)
    np.random.seed(4)
    write_accelerate_layout(tmp_path / "ckpt", nets, optimizer, scheduler, counter, step_count=5)
    expected = {"weights": [{k: v.clone() for k, v in net.state_dict().items()} for net in nets],
                "python": random.random(), "numpy": np.random.rand(), "torch": torch.rand(3)}
    step(accelerator, nets, optimizer, scheduler)  # move on and away from the saved state
    counter.count = 0

    with caplog.at_level("WARNING"):
        accelerator.load_state(str(tmp_path / "ckpt"))
    assert "no checksums" in caplog.text
    for net, weights in zip(nets, expected["weights"]):
        assert all(torch.equal(net.state_dict()[k], v) for k, v in weights.items())
    assert counter.count == 7 and accelerator.step == 5
    assert scheduler.state_dict()["last_epoch"] == 1
    assert random.random() == expected["python"] and np.random.rand() == expected["numpy"]
    assert torch.equal(torch.rand(3), expected["torch"])


def test_a_pickle_naming_a_class_is_refused_before_anything_changes(tmp_path):
    accelerator, nets, optimizer, scheduler, counter = prepared(0)
    write_accelerate_layout(tmp_path / "ckpt", nets, optimizer, scheduler, counter, step_count=1)
    torch.save({"count": Opaque()}, tmp_path / "ckpt" / "custom_checkpoint_0.pkl")
    before = {k: v.clone() for k, v in nets[0].state_dict().items()}
    with torch.no_grad():
        nets[0][0].weight.add_(1.0)
    changed = {k: v.clone() for k, v in nets[0].state_dict().items()}
    with pytest.raises(CheckpointError, match="custom_checkpoint_0.pkl cannot be read safely"):
        accelerator.load_state(str(tmp_path / "ckpt"))
    assert all(torch.equal(nets[0].state_dict()[k], v) for k, v in changed.items())
    assert not torch.equal(changed["0.weight"], before["0.weight"])


def test_an_accelerate_directory_for_other_objects_is_refused(tmp_path):
    accelerator, nets, optimizer, scheduler, counter = prepared(0)
    write_accelerate_layout(tmp_path / "ckpt", nets, optimizer, scheduler, counter, step_count=1)
    (tmp_path / "ckpt" / "optimizer.bin").unlink()
    with pytest.raises(CheckpointError, match="optimizer.bin is missing"):
        accelerator.load_state(str(tmp_path / "ckpt"))


def test_export_writes_what_accelerate_reads_and_resumes_the_same(tmp_path, cli):
    accelerator, nets, optimizer, scheduler, counter = prepared(1)
    step(accelerator, nets, optimizer, scheduler)
    counter.count = 3
    accelerator.save_state(str(tmp_path / "own"))
    expected_rng = torch.get_rng_state()
    result = cli("checkpoint", "export", "--format", "accelerate", str(tmp_path / "own"), str(tmp_path / "acc"))
    assert result.returncode == 0, result.stderr
    names = sorted(path.name for path in (tmp_path / "acc").iterdir())
    assert names == ["custom_checkpoint_0.pkl", "model.safetensors", "optimizer.bin", "random_states_0.pkl",
                     "scheduler.bin"]
    # Accelerate reads these pickles with weights_only and numpy's generator classes allowed
    states = torch.load(tmp_path / "acc" / "random_states_0.pkl", weights_only=False)
    assert states["step"] == accelerator.step and torch.equal(states["torch_manual_seed"], expected_rng)
    assert torch.load(tmp_path / "acc" / "custom_checkpoint_0.pkl", weights_only=True) == {"count": 3}
    saved_weights = safetensors.torch.load_file(tmp_path / "acc" / "model.safetensors")
    assert all(torch.equal(saved_weights[k], v) for k, v in nets[0].state_dict().items())

    other, other_nets, other_optimizer, other_scheduler, other_counter = prepared(2)
    other.load_state(str(tmp_path / "acc"))
    assert all(torch.equal(other_nets[0].state_dict()[k], v) for k, v in nets[0].state_dict().items())
    assert other_counter.count == 3 and torch.equal(torch.get_rng_state(), expected_rng)
    step(accelerator, nets, optimizer, scheduler)
    torch.set_rng_state(expected_rng)
    step(other, other_nets, other_optimizer, other_scheduler)
    assert all(torch.equal(other_nets[0].state_dict()[k], v) for k, v in nets[0].state_dict().items())


def test_export_refuses_a_foreign_source_or_a_used_destination(tmp_path, cli):
    accelerator, nets, optimizer, scheduler, counter = prepared(0)
    accelerator.save_state(str(tmp_path / "own"))
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "file").write_text("x")
    result = cli("checkpoint", "export", "--format", "accelerate", str(tmp_path / "own"), str(tmp_path / "used"))
    assert result.returncode == 2 and "not empty" in result.stderr
    write_accelerate_layout(tmp_path / "acc", nets, optimizer, scheduler, counter, step_count=0)
    result = cli("checkpoint", "export", "--format", "accelerate", str(tmp_path / "acc"), str(tmp_path / "out"))
    assert result.returncode == 2 and "manifest" in result.stderr
