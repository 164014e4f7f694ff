"""Checkpoints cross over: load_state reads Accelerate's layout; `drivetrain checkpoint export` writes it."""

from __future__ import annotations

import contextlib
import os
import random
import resource
import shutil
import tempfile
from pathlib import Path

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


@contextlib.contextmanager
def unprivileged():
    """This process as an ordinary user for the block: a folder's permissions bind root only then."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(65534)
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def one_line_refusal(result, *words):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("drivetrain: error:"), result.stderr
    assert all(word in lines[0] for word in words), lines[0]


def test_export_refuses_destinations_it_cannot_write_whole(cli):
    base = Path(tempfile.mkdtemp())
    try:
        base.chmod(0o755)  # readable by the ordinary user the read-only case runs as
        accelerator, *_ = prepared(0)
        accelerator.save_state(str(base / "own"))
        before = sorted(path.name for path in (base / "own").iterdir())

        def export(destination):
            return cli("checkpoint", "export", "--format", "accelerate", str(base / "own"), str(destination))

        one_line_refusal(export(base / "own" / "inside"), "inside", "outside")
        one_line_refusal(export(base / "own"), "inside")
        assert sorted(path.name for path in (base / "own").iterdir()) == before
        (base / "a-file").write_text("mine")
        one_line_refusal(export(base / "a-file"), "not a directory", "another path")
        assert (base / "a-file").read_text() == "mine"
        (base / "dangling").symlink_to(base / "nowhere")
        one_line_refusal(export(base / "dangling"), "broken symbolic link", "remove the link")
        assert not (base / "nowhere").exists()
        (base / "read-only").mkdir()
        (base / "read-only").chmod(0o555)
        with unprivileged():
            result = export(base / "read-only" / "out")
        one_line_refusal(result, "cannot be written", "writable directory")
        assert list((base / "read-only").iterdir()) == []
    finally:
        shutil.rmtree(base)


def test_a_write_error_mid_export_leaves_nothing_that_looks_complete(tmp_path, cli):
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    big = accelerator.prepare(torch.nn.Linear(1024, 512))  # 2 MiB of weights
    accelerator.save_state(str(tmp_path / "own"))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    # A file may not grow past 1 MiB: the weights' write fails half-way as on a full disk
    # (Python ignores SIGXFSZ, so the write returns EFBIG).
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, hard))
    try:
        result = cli("checkpoint", "export", "--format", "accelerate", str(tmp_path / "own"), str(tmp_path / "acc"))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    one_line_refusal(result, "could not write", "nothing was left there", "free space")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["own"]
    result = cli("checkpoint", "export", "--format", "accelerate", str(tmp_path / "own"), str(tmp_path / "acc"))
    assert result.returncode == 0, result.stderr
    weights = safetensors.torch.load_file(tmp_path / "acc" / "model.safetensors")
    assert torch.equal(weights["weight"], big.weight.detach())
