"""``save_state(blocking=False)``: the state is copied off the training tensors, then written,
hashed, synced and committed beside training; waits, crashes and failures keep the guarantees
of a blocking save."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from drivetrain import Accelerator, ProjectConfiguration
from drivetrain.checkpointing import layout, process_state
from drivetrain.errors import CheckpointError
from drivetrain.services.checkpointing.deferred import DeferredWrites, copy_to_host

pytestmark = pytest.mark.usefixtures("fresh_state")


def _prepared(accelerator):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    _step(accelerator, model, optimizer, scheduler)
    return model, optimizer, scheduler


def _step(accelerator, model, optimizer, scheduler):
    accelerator.backward(model(torch.randn(8, 16).to(accelerator.device)).pow(2).mean())
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()


def _snapshot(model, optimizer, scheduler):
    return ([p.detach().clone() for p in model.parameters()], copy_to_host(optimizer.state_dict()),
            scheduler.state_dict())


def _same(snapshot, model, optimizer, scheduler) -> bool:
    params, optimizer_state, scheduler_state = snapshot
    now = optimizer.state_dict()["state"]
    return (all(torch.equal(a, b) for a, b in zip(params, model.parameters()))
            and all(torch.equal(optimizer_state["state"][k]["exp_avg"], now[k]["exp_avg"]) for k in now)
            and scheduler_state == scheduler.state_dict())


def _hold_writing(monkeypatch):
    """Writing a non-blocking save waits for ``release``; ``writing`` is set once it waits."""
    release, writing = threading.Event(), threading.Event()
    real = process_state.write

    def held(*args, **kwargs):
        writing.set()
        assert release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(process_state, "write", held)
    return release, writing


def test_save_returns_before_writing_and_the_checkpoint_holds_the_state_at_the_call(tmp_path, monkeypatch):
    accelerator = Accelerator(project_config=ProjectConfiguration(project_dir=str(tmp_path),
                                                                  automatic_checkpoint_naming=True, total_limit=1))
    model, optimizer, scheduler = _prepared(accelerator)
    accelerator.save_state()  # checkpoint_0, blocking
    release, writing = _hold_writing(monkeypatch)
    at_save = _snapshot(model, optimizer, scheduler)
    directory = Path(accelerator.save_state(blocking=False))
    assert writing.wait(30) and directory.name == "checkpoint_1"
    # nothing written yet, nothing visible: the newest complete checkpoint is still the last one
    assert not directory.exists() and [n for n, _p in layout.automatic_checkpoints(directory.parent)] == [0]
    for _ in range(3):  # training changes every tensor the checkpoint holds meanwhile
        _step(accelerator, model, optimizer, scheduler)
    assert not _same(at_save, model, optimizer, scheduler)
    release.set()
    accelerator.wait_for_checkpoint()
    assert [n for n, _p in layout.automatic_checkpoints(directory.parent)] == [1]  # rotated after the commit
    manifest = layout.read_manifest(directory)
    assert "model_0/model.safetensors" in manifest["files"] and set(manifest["checksums"]) == set(manifest["files"])
    accelerator.load_state()
    assert _same(at_save, model, optimizer, scheduler)


def test_the_next_save_load_and_end_training_wait_for_a_pending_one(tmp_path, monkeypatch):
    release, writing = _hold_writing(monkeypatch)
    accelerator = Accelerator()
    model, optimizer, scheduler = _prepared(accelerator)
    first = Path(accelerator.save_state(tmp_path / "a", blocking=False))
    assert writing.wait(30)
    threading.Timer(0.3, release.set).start()
    started = time.monotonic()
    accelerator.load_state(first)  # waits for the commit, then loads it
    assert time.monotonic() - started >= 0.25 and layout.read_manifest(first)
    writing.clear()
    release.clear()
    threading.Timer(0.3, release.set).start()
    accelerator.save_state(tmp_path / "b", blocking=False)
    accelerator.end_training()
    assert layout.read_manifest(tmp_path / "b")


def test_a_failure_while_writing_is_raised_at_the_next_wait_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    accelerator = Accelerator(project_config=ProjectConfiguration(project_dir=str(tmp_path),
                                                                  automatic_checkpoint_naming=True))
    model, optimizer, scheduler = _prepared(accelerator)
    accelerator.save_state()

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(process_state, "write", broken)
    accelerator.save_state(blocking=False)
    with pytest.raises(CheckpointError, match="checkpoint_1 was not completed.*No space left on device"):
        accelerator.wait_for_checkpoint()
    root = tmp_path / "checkpoints"
    assert [n for n, _p in layout.automatic_checkpoints(root)] == [0]
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # the partial one is gone
    accelerator.load_state()


def test_deferred_writes_run_on_the_commit_thread_and_their_files_are_in_the_manifest(tmp_path):
    deferred = DeferredWrites()
    ran_on: list[str] = []

    def write():
        ran_on.append(threading.current_thread().name)
        (tmp_path / "extra.bin").write_bytes(b"x")
        return ["extra.bin"]

    deferred.defer(write)
    assert len(deferred) == 1 and ran_on == []
    assert deferred.run() == ["extra.bin"] and ran_on == [threading.current_thread().name]
    nested = {"a": [torch.ones(2), (torch.zeros(1), 3)], "b": "text"}
    copied = copy_to_host(nested)
    nested["a"][0].add_(1)
    assert torch.equal(copied["a"][0], torch.ones(2)) and copied["a"][1][1] == 3 and copied["b"] == "text"


CRASH = textwrap.dedent("""
    import os, sys, time
    import torch
    from drivetrain import Accelerator, ProjectConfiguration
    from drivetrain.checkpointing import process_state
    accelerator = Accelerator(project_config=ProjectConfiguration(project_dir=sys.argv[1],
                                                                  automatic_checkpoint_naming=True))
    torch.manual_seed(0)
    model = accelerator.prepare(torch.nn.Linear(256, 256))
    accelerator.save_state()
    real = process_state.write
    def slow(*args, **kwargs):
        print("WRITING", flush=True)
        time.sleep(60)
        return real(*args, **kwargs)
    process_state.write = slow
    with torch.no_grad():
        model.weight.add_(1.0)
    accelerator.save_state(blocking=False)
    print("RETURNED", flush=True)
    time.sleep(60)
""")


@pytest.mark.multiprocess
def test_a_crash_before_the_commit_leaves_the_previous_checkpoint_the_newest(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", CRASH, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if "RETURNED" in "".join(lines) and "WRITING" in "".join(lines):
            break
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    root = tmp_path / "checkpoints"
    assert [n for n, _p in layout.automatic_checkpoints(root)] == [0]
    accelerator = Accelerator(project_config=ProjectConfiguration(project_dir=str(tmp_path),
                                                                  automatic_checkpoint_naming=True))
    torch.manual_seed(0)
    model = accelerator.prepare(torch.nn.Linear(256, 256))
    expected = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.zero_()
    assert accelerator.load_state().endswith("checkpoint_0")
    assert torch.equal(model.weight, expected)  # the state of checkpoint_0, not the half-saved one


def test_a_script_that_ends_right_after_a_non_blocking_save_still_completes_it(tmp_path):
    script = textwrap.dedent(f"""
        import torch
        from drivetrain import Accelerator
        accelerator = Accelerator()
        model = accelerator.prepare(torch.nn.Linear(512, 512))
        accelerator.save_state({str(tmp_path / "ckpt")!r}, blocking=False)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "model_0/model.safetensors" in layout.read_manifest(tmp_path / "ckpt")["files"]
