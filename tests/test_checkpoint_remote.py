"""Checkpoints at fsspec URLs: s3:// on a real S3-compatible server (moto's, on localhost),
file:// and memory://. Uploads put the manifest last; a checkpoint without one is never
loaded, never the newest, and is cleaned up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import clean_environ
from drivetrain import Accelerator, ProjectConfiguration
from drivetrain.errors import CheckpointError
from launching import SCRIPTS, assert_ok, launch
from remote_store import CREDENTIALS, s3_server  # noqa: F401  (the fixture)

pytestmark = pytest.mark.usefixtures("fresh_state")
sys.path.insert(0, str(SCRIPTS))
import remote_checkpoint  # noqa: E402  (the launched script; its helpers serve the in-process tests too)


@pytest.fixture
def s3(s3_server, clean_env, tmp_path):
    """The server, with credentials in the environment and staging under the test's folder."""
    for key, value in CREDENTIALS.items():
        clean_env.setenv(key, value)
    clean_env.setenv("DRIVETRAIN_CHECKPOINT_STAGING_DIR", str(tmp_path / "staging"))
    return s3_server


def staged_files(tmp_path: Path) -> list[str]:
    root = tmp_path / "staging"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "downloads" not in p.parts)


@pytest.mark.parametrize("background", ["0", "1"])
def test_save_rotate_and_resume_through_s3_bitwise(s3, tmp_path, clean_env, background):
    clean_env.setenv("DRIVETRAIN_CHECKPOINT_BACKGROUND", background)  # the upload runs in the commit's thread
    project = s3.new_bucket() + "/run"
    remote_checkpoint.save_and_resume(s3.endpoint, project)
    folders = sorted({key.split("/")[0] for key in s3.keys(project + "/checkpoints")})
    assert folders == ["checkpoint_1", "checkpoint_2"]  # total_limit=2 rotated checkpoint_0 away on the store
    assert "checkpoints/checkpoint_2/manifest.json" in s3.keys(project)
    assert staged_files(tmp_path) == []  # the staging copies are gone once uploaded


def test_an_incomplete_checkpoint_is_never_loaded_nor_newest_and_is_cleaned_up(s3, tmp_path):
    import s3fs

    project = s3.new_bucket() + "/run"
    accelerator, model, optimizer, scheduler = remote_checkpoint.setup(s3.endpoint, project, total_limit=None)
    remote_checkpoint.train(accelerator, model, optimizer, scheduler, 1)
    accelerator.save_state()
    saved = remote_checkpoint.snapshot(model, optimizer, scheduler)
    fs = s3fs.S3FileSystem(endpoint_url=s3.endpoint)
    # what killed uploads leave: files, no manifest; one at the next name, one far beyond it
    for name in ("checkpoint_1/model_0/model.safetensors", "checkpoint_1/stray.bin", "checkpoint_7/optimizer_0.json"):
        fs.pipe_file(f"{project.removeprefix('s3://')}/checkpoints/{name}", b"partial")
    with pytest.raises(CheckpointError, match="no manifest.json"):
        accelerator.load_state(project + "/checkpoints/checkpoint_7")
    remote_checkpoint.train(accelerator, model, optimizer, scheduler, 2)
    assert accelerator.load_state().endswith("checkpoint_0")  # not 7, not 1
    assert all(torch.equal(a, b) for a, b in zip(saved, remote_checkpoint.snapshot(model, optimizer, scheduler)))
    assert accelerator.save_iteration == 1
    accelerator.save_state()  # checkpoint_1: replaces the leftover there, deletes checkpoint_7's
    keys = s3.keys(project + "/checkpoints")
    assert "checkpoint_1/stray.bin" not in keys and not any(key.startswith("checkpoint_7/") for key in keys)
    assert "checkpoint_1/manifest.json" in keys
    assert accelerator.load_state().endswith("checkpoint_1")


def test_a_kill_during_the_upload_leaves_the_previous_checkpoint_newest(s3, tmp_path):
    project = s3.new_bucket() + "/run"
    marker = tmp_path / "stalled"
    env = clean_environ(**CREDENTIALS, DRIVETRAIN_CHECKPOINT_STAGING_DIR=str(tmp_path / "writer-staging"))
    writer = subprocess.Popen([sys.executable, str(SCRIPTS / "remote_checkpoint.py"), s3.endpoint, project,
                               "stall-upload", str(marker)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and writer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), writer.communicate(timeout=10)[0] if writer.poll() is not None else "no stall"
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
    keys = s3.keys(project + "/checkpoints")
    assert any(key.startswith("checkpoint_1/") for key in keys) and "checkpoint_1/manifest.json" not in keys
    accelerator, model, optimizer, scheduler = remote_checkpoint.setup(s3.endpoint, project, total_limit=1)
    remote_checkpoint.train(accelerator, model, optimizer, scheduler, 2)  # as the writer did before checkpoint_0
    at_checkpoint_0 = remote_checkpoint.snapshot(model, optimizer, scheduler)
    remote_checkpoint.train(accelerator, model, optimizer, scheduler, 1)
    assert accelerator.load_state().endswith("checkpoint_0")
    resumed = remote_checkpoint.snapshot(model, optimizer, scheduler)
    assert all(torch.equal(a, b) for a, b in zip(at_checkpoint_0, resumed))
    accelerator.save_state()  # checkpoint_1 again, complete this time; total_limit=1 rotates checkpoint_0
    assert sorted({key.split("/")[0] for key in s3.keys(project + "/checkpoints")}) == ["checkpoint_1"]


def test_two_processes_save_rotate_and_resume_through_s3(s3, tmp_path):
    # Each process stages in a folder of its own (as machines without a shared disk) and
    # uploads its own files; the main one uploads the manifest once both are up.
    project = s3.new_bucket() + "/run"
    result = launch("remote_checkpoint.py", s3.endpoint, project, "save-and-resume-then-background",
                    env={**CREDENTIALS, "DRIVETRAIN_CHECKPOINT_STAGING_DIR": str(tmp_path / "staging")})
    assert_ok(result)
    assert result.stdout.count("resumed checkpoint_2 bitwise") == 2, result.stdout
    assert result.stdout.count("checkpoint_3 uploaded in the background") == 2, result.stdout
    assert result.stdout.count("a failed upload left checkpoint_3 the newest") == 2, result.stdout
    assert sorted({key.split("/")[0] for key in s3.keys(project + "/checkpoints")}) == ["checkpoint_3", "checkpoint_4"]
    names = s3.keys(project + "/checkpoints/checkpoint_4")
    assert "random_states_0.json" in names and "random_states_1.json" in names and "manifest.json" in names
    assert not [key for key in s3.keys(project) if "/.synced-" in key or "/.failed-" in key]  # markers removed


def test_a_missing_store_library_is_one_line_before_anything_is_written(s3, tmp_path, monkeypatch):
    import fsspec  # noqa: F401  (loads fsspec.registry)

    registry = sys.modules["fsspec.registry"]  # the module (``fsspec.registry`` is a mapping of it)
    monkeypatch.delitem(registry._registry, "s3", raising=False)  # put back after the test
    monkeypatch.setitem(sys.modules, "s3fs", None)  # as if drivetrain[s3] were not installed
    project = s3.new_bucket() + "/run"
    accelerator, model, optimizer, scheduler = remote_checkpoint.setup(s3.endpoint, project)
    with pytest.raises(CheckpointError, match=r"pip install 'drivetrain\[s3\]'") as error:
        accelerator.save_state()
    assert "\n" not in str(error.value)
    assert not (tmp_path / "staging").exists()
    monkeypatch.undo()
    assert s3.keys(project) == []


@pytest.mark.parametrize("scheme", ["file", "memory"])
def test_save_state_to_a_url_replaces_the_checkpoint_there_and_loads_it(scheme, tmp_path, clean_env):
    clean_env.setenv("DRIVETRAIN_CHECKPOINT_STAGING_DIR", str(tmp_path / "staging"))
    url = (f"file://{tmp_path}/store/ckpt" if scheme == "file" else f"memory://{tmp_path.name}/ckpt")
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert accelerator.save_state(url) == url
    with torch.no_grad():
        model.weight.add_(1.0)
    second = [p.detach().clone() for p in model.parameters()]
    accelerator.save_state(url)  # over the first: its manifest goes first, the new one comes last
    with torch.no_grad():
        model.weight.zero_()
    assert accelerator.load_state(url) == url
    assert all(torch.equal(a, b) for a, b in zip(second, model.parameters()))
    [copy] = (tmp_path / "staging" / "downloads").glob("*/*/ckpt/manifest.json")  # the local copy loaded
    first_download = copy.stat().st_ino
    accelerator.load_state(url)
    assert copy.stat().st_ino == first_download  # intact: reused, not downloaded again
    if scheme == "file":
        assert (tmp_path / "store" / "ckpt" / "manifest.json").is_file()
        assert not list((tmp_path / "store").glob(".*"))  # nothing hidden left beside it


def test_a_url_without_a_file_system_is_refused_clearly(tmp_path, clean_env):
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    with pytest.raises(CheckpointError, match="fsspec knows no nosuchstore://"):
        accelerator.save_state("nosuchstore://bucket/ckpt")
    del model


def test_a_damaged_file_in_the_store_fails_the_load_and_changes_nothing(tmp_path, clean_env):
    clean_env.setenv("DRIVETRAIN_CHECKPOINT_STAGING_DIR", str(tmp_path / "staging"))
    store = tmp_path / "store"
    accelerator = Accelerator(project_config=ProjectConfiguration(project_dir=f"file://{store}",
                                                                  automatic_checkpoint_naming=True))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.save_state()
    weights = store / "checkpoints" / "checkpoint_0" / "model_0" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, one bit pattern changed: only the checksum can tell
    weights.write_bytes(bytes(data))
    with torch.no_grad():
        model.weight.zero_()
    with pytest.raises(CheckpointError, match="model.safetensors"):
        accelerator.load_state()
    assert torch.count_nonzero(model.weight) == 0
    weights.unlink()
    with pytest.raises(CheckpointError, match="lists a file the store does not hold"):
        accelerator.load_state()
    assert torch.count_nonzero(model.weight) == 0


def test_save_on_each_node_with_a_url_on_several_machines_is_refused_before_writing(tmp_path, clean_env,
                                                                                      monkeypatch):
    from drivetrain.state import PartialState

    clean_env.setenv("DRIVETRAIN_CHECKPOINT_STAGING_DIR", str(tmp_path / "staging"))
    accelerator = Accelerator(project_config=ProjectConfiguration(save_on_each_node=True))
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    monkeypatch.setattr(PartialState, "num_machines", property(lambda state: 2))  # as on 2 machines
    url = f"file://{tmp_path}/store/ckpt"
    with pytest.raises(CheckpointError, match="set save_on_each_node=False"):
        accelerator.save_state(url)
    assert not (tmp_path / "store").exists() and not (tmp_path / "staging").exists()
    accelerator.project_configuration.save_on_each_node = False
    assert accelerator.save_state(url) == url
    assert (tmp_path / "store" / "ckpt" / "manifest.json").is_file()
    del model
