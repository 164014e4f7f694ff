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
from drivetrain.checkpointing import layout, target
from drivetrain.checkpointing.checksums import file_digest
from drivetrain.checkpointing.model_files import read_model_files
from drivetrain.checkpointing.tree_io import load_tree, save_tree
from drivetrain.errors import CheckpointError, ConfigError

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


# ------------------------------------------------------ the user's files are never lost


def user_files(root: Path) -> dict[str, str]:
    """A few files of a user's project, by relative name and content."""
    files = {"train.py": "print('train')\n", "data/rows.csv": "a,b\n1,2\n", "notes/plan.txt": "step 2\n"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return files


def assert_untouched(root: Path, files: dict[str, str]) -> None:
    assert {name: (root / name).read_text() for name in files} == files


def test_save_state_into_the_current_directory_keeps_the_users_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = user_files(tmp_path)
    accelerator = Accelerator()
    model, _optimizer, _scheduler = trained(accelerator, steps=1)
    saved = params(model)
    for where in (".", os.getcwd()):
        accelerator.save_state(where)
        accelerator.wait_for_everyone()
        assert_untouched(tmp_path, files)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries left
    accelerator.load_state(".")
    assert all(torch.equal(a, b) for a, b in zip(saved, model.parameters()))


def test_save_state_into_a_folder_writes_beside_the_users_files_and_replaces_only_its_own(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    files = user_files(results)
    accelerator = Accelerator()
    model, _optimizer, _scheduler = trained(accelerator, steps=1)
    accelerator.save_state(results, safe_serialization=False)
    accelerator.wait_for_everyone()
    assert (results / "model_0" / "pytorch_model.bin").exists()
    trained_more = params(trained(accelerator, steps=2)[0])
    accelerator.save_state(results)  # the previous checkpoint's files there are replaced, the user's stay
    accelerator.wait_for_everyone()
    assert_untouched(results, files)
    assert not (results / "model_0" / "pytorch_model.bin").exists() and (results / "model_0" / "model.safetensors").exists()
    contents = set(json.loads((results / "manifest.json").read_text())["contents"])
    assert not contents & set(files)
    accelerator.load_state(results)
    assert all(torch.equal(a, b) for a, b in zip(trained_more, accelerator._models[-1].parameters()))


def test_a_file_of_the_user_named_like_a_checkpoint_file_fails_the_save_and_stays(tmp_path, monkeypatch):
    monkeypatch.setenv("DRIVETRAIN_CHECKPOINT_BACKGROUND", "0")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "optimizer_0.json").write_text("mine")
    accelerator = Accelerator()
    trained(accelerator, steps=1)
    with pytest.raises(CheckpointError, match="already holds optimizer_0.json, which are not part of"):
        accelerator.save_state(tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["optimizer_0.json"]
    assert (tmp_path / "out" / "optimizer_0.json").read_text() == "mine"


def test_a_directory_holding_only_a_checkpoint_is_replaced_and_one_with_more_is_written_into(tmp_path):
    accelerator = Accelerator()
    trained(accelerator, steps=1)
    directory = Path(accelerator.save_state(tmp_path / "ckpt"))
    accelerator.wait_for_everyone()
    assert target.placement(directory) == target.BESIDE  # replaced atomically, as before
    (directory / "README.md").write_text("what this run was")
    assert target.placement(directory) == target.INSIDE
    accelerator.save_state(directory)
    accelerator.wait_for_everyone()
    assert (directory / "README.md").read_text() == "what this run was"
    assert accelerator.load_state(directory)


@pytest.mark.parametrize("kind", ["file", "fifo", "symlink to a file", "broken symlink"])
def test_save_state_refuses_a_path_that_is_not_a_directory_before_writing(tmp_path, kind):
    path = tmp_path / "model.txt"
    if kind == "file":
        path.write_text("weights notes")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink to a file":
        (tmp_path / "real.txt").write_text("weights notes")
        path.symlink_to(tmp_path / "real.txt")
    else:
        path.symlink_to(tmp_path / "gone")
    before = sorted(p.name for p in tmp_path.iterdir())
    accelerator = Accelerator()
    trained(accelerator, steps=1)
    with pytest.raises(CheckpointError, match="not a directory|broken symbolic link") as error:
        accelerator.save_state(path)
    assert "\n" not in str(error.value)
    accelerator.wait_for_everyone()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written beside it either
    assert path.is_symlink() or path.is_fifo() or path.read_text() == "weights notes"


def test_save_state_where_no_directory_can_be_made_is_one_line(tmp_path):
    (tmp_path / "a_file").write_text("x")
    accelerator = Accelerator()
    trained(accelerator, steps=1)
    with pytest.raises(CheckpointError, match="cannot save the state into .*choose a directory you can write to"):
        accelerator.save_state(tmp_path / "a_file" / "ckpt")
    assert (tmp_path / "a_file").read_text() == "x"


def test_a_folder_whose_parent_cannot_be_written_gets_the_checkpoint_inside(tmp_path, monkeypatch):
    directory = tmp_path / "ckpt"
    accelerator = Accelerator()
    trained(accelerator, steps=1)
    accelerator.save_state(directory)
    accelerator.wait_for_everyone()
    real_access = os.access
    monkeypatch.setattr(target.os, "access", lambda path, mode: Path(path) != tmp_path and real_access(path, mode))
    assert target.placement(directory) == target.INSIDE
    accelerator.save_state(directory)
    accelerator.wait_for_everyone()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing made beside it
    assert accelerator.load_state(directory)


def test_save_model_writes_into_the_folder_and_refuses_what_is_not_one(tmp_path):
    accelerator = Accelerator()
    torch.manual_seed(1)
    model = accelerator.prepare(torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)]))
    out = tmp_path / "out"
    out.mkdir()
    files = user_files(out)
    accelerator.save_model(model, out, max_shard_size="20KB")
    assert (out / "model.safetensors.index.json").exists()
    accelerator.save_model(model, out)  # one file now: the sharded save's index and shards go
    assert_untouched(out, files)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("model")) == ["model.safetensors"]
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(CheckpointError, match="not a directory"):
        accelerator.save_model(model, tmp_path / "pipe")
    with pytest.raises(CheckpointError, match="is a directory; name a file in it"):
        accelerator.save(model.state_dict(), out)


@pytest.mark.parametrize("settings", [{"total_limit": 0}, {"total_limit": -1}, {"iteration": -1}])
def test_rotation_settings_that_keep_nothing_are_refused(settings):
    with pytest.raises(ValueError, match="pass .*or more") as error:
        ProjectConfiguration(automatic_checkpoint_naming=True, **settings)
    assert isinstance(error.value, ConfigError)
    config = ProjectConfiguration(automatic_checkpoint_naming=True)
    with pytest.raises(ConfigError):
        setattr(config, *next(iter(settings.items())))


def test_rotation_never_deletes_the_checkpoint_just_saved(tmp_path):
    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=1,
                                  iteration=5)
    accelerator = Accelerator(project_config=config)
    trained(accelerator, steps=1)
    accelerator.save_state()
    config.iteration = 0  # set back by hand: the new checkpoint has the lowest number
    newest = Path(accelerator.save_state())
    accelerator.wait_for_everyone()
    assert newest.name == "checkpoint_0" and newest.exists()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["checkpoint_0"]
