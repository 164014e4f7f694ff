"""Checkpoints in one process: formats, atomic layout, rotation, refusal of bad files."""

from __future__ import annotations

import json
import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from drivetrain import Accelerator, ProjectConfiguration, load_checkpoint_in_model
from drivetrain.checkpointing import layout
from drivetrain.checkpointing.checksums import file_digest
from drivetrain.checkpointing.model_files import read_model_files
from drivetrain.checkpointing.tree_io import load_tree, save_tree
from drivetrain.errors import CheckpointError

pytestmark = pytest.mark.usefixtures("fresh_state")


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.body = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.body(self.embed(ids))))


def trained(accelerator, steps=2, **prepare_extra):
    torch.manual_seed(0)
    model = Tied()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.9)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    for _ in range(steps):
        accelerator.backward(model(torch.randint(0, 10, (3, 5)).to(accelerator.device)).sum())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return model, optimizer, scheduler


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def test_state_tree_round_trip_without_pickle(tmp_path):
    tree = {"ints": {0: torch.arange(3), 7: [1.5, float("inf"), None]}, "tuple": (1, "a", torch.ones(2, dtype=torch.bfloat16)),
            "np": np.random.get_state(), "py": random.getstate(), "dtype": torch.float16, "nested": [{"x": True}]}
    files = save_tree(tree, tmp_path / "state")
    assert sorted(files) == ["state.json", "state.safetensors"]
    back = load_tree(tmp_path / "state")
    assert torch.equal(back["ints"][0], torch.arange(3)) and back["ints"][7][1] == float("inf")
    assert back["tuple"][:2] == (1, "a") and back["tuple"][2].dtype == torch.bfloat16
    assert back["np"][0] == "MT19937" and np.array_equal(back["np"][1], tree["np"][1])
    assert back["py"] == tree["py"] and back["dtype"] is torch.float16 and back["nested"] == [{"x": True}]


def test_state_tree_refuses_objects_with_their_path(tmp_path):
    with pytest.raises(CheckpointError, match=r"\.scheduler\.fn: a function"):
        save_tree({"scheduler": {"fn": lambda x: x}}, tmp_path / "bad")


def test_save_and_load_state_restore_everything(tmp_path):
    accelerator = Accelerator()
    model, optimizer, scheduler = trained(accelerator)
    counter = torch.nn.Linear(1, 1)
    accelerator.register_for_checkpointing(counter)
    saved_params, saved_lr = params(model), scheduler.get_last_lr()
    directory = accelerator.save_state(tmp_path / "ckpt")
    accelerator.wait_for_everyone()  # the commit (sync, rename) finishes in the background
    manifest = json.loads((Path(directory) / "manifest.json").read_text())
    assert manifest["world_size"] == 1 and manifest["counts"]["models"] == 1
    assert "model_0/model.safetensors" in manifest["files"] and manifest["plugins"][accelerator.run.selection.platform_plugin]
    expected_draw = torch.rand(3)
    trained_further = trained  # noqa: F841 - keep training to change everything
    accelerator.backward(model(torch.randint(0, 10, (3, 5)).to(accelerator.device)).sum())
    optimizer.step()
    scheduler.step()
    with torch.no_grad():
        counter.weight.fill_(5)
    accelerator.load_state(directory)
    assert all(torch.equal(a, b) for a, b in zip(saved_params, model.parameters()))
    assert scheduler.get_last_lr() == saved_lr
    assert torch.equal(torch.rand(3), expected_draw)  # RNG continues as after the save
    assert counter.weight.item() != 5


def test_tied_weights_are_stored_once_and_stay_tied(tmp_path):
    accelerator = Accelerator()
    model, _, _ = trained(accelerator)
    accelerator.save_model(model, tmp_path / "weights")
    from safetensors.torch import load_file

    assert sorted(load_file(tmp_path / "weights" / "model.safetensors")) == ["body.bias", "body.weight", "embed.weight"]
    state = read_model_files(tmp_path / "weights")
    assert state["head.weight"] is state["embed.weight"]
    fresh = Tied()
    load_checkpoint_in_model(fresh, tmp_path / "weights")
    fresh.to(accelerator.device)
    ids = torch.randint(0, 10, (2, 5)).to(accelerator.device)
    torch.testing.assert_close(fresh(ids), model(ids))
    assert fresh.head.weight is fresh.embed.weight


def test_save_model_shards_with_an_index(tmp_path):
    accelerator = Accelerator()
    torch.manual_seed(1)
    model = accelerator.prepare(torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)]))
    accelerator.save_model(model, tmp_path / "sharded", max_shard_size="20KB")
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) == 4 and shards[0] == "model-00001-of-00004.safetensors"
    fresh = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)])
    load_checkpoint_in_model(fresh, tmp_path / "sharded", strict=True, dtype=torch.float64)
    fresh.to(accelerator.device)
    x = torch.randn(2, 64, dtype=torch.float64).to(accelerator.device)
    torch.testing.assert_close(fresh(x), model.double()(x))
    accelerator.save_model(model, tmp_path / "bin", safe_serialization=False)
    assert (tmp_path / "bin" / "pytorch_model.bin").exists()


def test_automatic_naming_rotation_and_newest_complete(tmp_path):
    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(project_config=config)
    model, optimizer, scheduler = trained(accelerator, steps=1)
    for _ in range(4):
        accelerator.save_state()
    accelerator.wait_for_everyone()
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["checkpoint_2", "checkpoint_3"]
    # leftovers of interrupted saves are never chosen
    (root / ".tmp-checkpoint_4-deadbeef").mkdir()
    (root / "checkpoint_9").mkdir()  # no manifest: a save that never finished
    newest = params(model)
    assert accelerator.load_state().endswith("checkpoint_3")
    assert all(torch.equal(a, b) for a, b in zip(newest, model.parameters()))
    assert accelerator.save_iteration == 4
    with pytest.raises(CheckpointError, match="already exists"):
        accelerator.project_configuration.iteration = 3
        accelerator.save_state()


def test_pre_hooks_and_their_handles(tmp_path):
    accelerator = Accelerator()
    trained(accelerator, steps=1)
    calls = []
    save_handle = accelerator.register_save_state_pre_hook(lambda models, weights, d: calls.append(("save", len(weights))))
    load_handle = accelerator.register_load_state_pre_hook(lambda models, d: calls.append(("load", len(models))))
    directory = accelerator.save_state(tmp_path / "c")
    accelerator.load_state(directory)
    save_handle.remove()
    load_handle.remove()
    accelerator.save_state(tmp_path / "c")
    assert calls == [("save", 1), ("load", 1)]


def test_malicious_pickle_is_never_executed(tmp_path):
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    accelerator = Accelerator()
    model, _, _ = trained(accelerator, steps=1)
    directory = Path(accelerator.save_state(tmp_path / "c", safe_serialization=False))
    accelerator.wait_for_everyone()
    weights = directory / "model_0" / "pytorch_model.bin"
    with open(weights, "wb") as handle:
        pickle.dump({"embed.weight": Exploit()}, handle)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["sizes"]["model_0/pytorch_model.bin"] = weights.stat().st_size
    manifest["checksums"]["model_0/pytorch_model.bin"] = file_digest(weights)  # past the checksum: the loader itself
    (directory / "manifest.json").write_text(json.dumps(manifest))
    before = params(model)
    with pytest.raises(CheckpointError, match="cannot be read safely"):
        accelerator.load_state(directory)
    assert not marker.exists()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    # a pickle in place of a JSON state file is just invalid JSON
    (directory / "optimizer_0.json").write_bytes(pickle.dumps(Exploit()))
    with pytest.raises(CheckpointError):
        load_tree(directory / "optimizer_0")
    assert not marker.exists()


def test_truncated_or_corrupt_files_name_the_file_and_change_nothing(tmp_path):
    accelerator = Accelerator()
    model, optimizer, _ = trained(accelerator)
    directory = Path(accelerator.save_state(tmp_path / "c"))
    accelerator.wait_for_everyone()
    accelerator.backward(model(torch.randint(0, 10, (3, 5)).to(accelerator.device)).sum())
    optimizer.step()
    before = params(model)
    victim = directory / "optimizer_0.safetensors"
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"optimizer_0\.safetensors has 100 bytes"):
        accelerator.load_state(directory)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    # same size, garbage header: still named
    size = json.loads((directory / "manifest.json").read_text())["sizes"]["optimizer_0.safetensors"]
    victim.write_bytes(b"\xff" * size)
    with pytest.raises(CheckpointError, match=r"optimizer_0\.safetensors is damaged"):
        accelerator.load_state(directory)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_foreign_or_future_checkpoints_are_refused_clearly(tmp_path):
    accelerator = Accelerator()
    trained(accelerator, steps=1)
    with pytest.raises(CheckpointError, match="no manifest.json"):
        (tmp_path / "empty").mkdir()
        accelerator.load_state(tmp_path / "empty")
    directory = Path(accelerator.save_state(tmp_path / "c"))
    accelerator.wait_for_everyone()
    manifest = json.loads((directory / "manifest.json").read_text())
    (directory / "manifest.json").write_text(json.dumps(dict(manifest, format_version=99)))
    with pytest.raises(CheckpointError, match="upgrade drivetrain"):
        accelerator.load_state(directory)
    (directory / "manifest.json").write_text(json.dumps(dict(manifest, counts={"models": 2})))
    with pytest.raises(CheckpointError, match="models: checkpoint 2, prepared 1"):
        accelerator.load_state(directory)


def test_a_crash_between_the_two_renames_is_recovered(tmp_path):
    accelerator = Accelerator()
    trained(accelerator, steps=1)
    directory = Path(accelerator.save_state(tmp_path / "c"))
    accelerator.wait_for_everyone()
    os.rename(directory, tmp_path / f"{layout.TRASH_PREFIX}c-1234")  # old moved away, new never arrived
    assert accelerator.load_state(tmp_path / "c")


def test_mid_accumulation_save_keeps_pending_gradients(tmp_path):
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model, optimizer, _ = trained(accelerator, steps=0)
    with accelerator.accumulate(model):
        accelerator.backward(model(torch.randint(0, 10, (3, 5)).to(accelerator.device)).sum())
    assert not accelerator.sync_gradients
    grads = [p.grad.clone() for p in model.parameters()]
    directory = accelerator.save_state(tmp_path / "c")
    optimizer.zero_grad(set_to_none=True)
    accelerator.gradient_state._set_sync_gradients(True)
    model.zero_grad(set_to_none=True)
    accelerator.load_state(directory)
    assert not accelerator.sync_gradients and accelerator.step == 1
    assert all(torch.equal(a, p.grad) for a, p in zip(grads, model.parameters()))
