"""The checkpoint commit (sync, manifest, rename) running beside training, and parallel file I/O."""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

from drivetrain import Accelerator
from drivetrain.checkpointing import commit, io_pool, layout
from drivetrain.checkpointing.io_pool import FileJobs, shard_bytes
from drivetrain.checkpointing.tree_io import load_tree, save_tree
from drivetrain.errors import CheckpointError

pytestmark = pytest.mark.usefixtures("fresh_state")


def prepared(accelerator):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    step(accelerator, model, optimizer)
    return model, optimizer


def step(accelerator, model, optimizer):
    accelerator.backward(model(torch.randn(8, 16).to(accelerator.device)).pow(2).mean())
    optimizer.step()
    optimizer.zero_grad()


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def hidden_leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def held_background_sync(monkeypatch):
    """Background commits whose sync waits for ``release``; ``syncing`` is set once one waits."""
    monkeypatch.setenv("DRIVETRAIN_CHECKPOINT_BACKGROUND", "1")
    release, syncing = threading.Event(), threading.Event()
    real_sync = commit.sync_files

    def held_sync(temporary, files):
        syncing.set()
        assert release.wait(30)
        real_sync(temporary, files)

    monkeypatch.setattr(commit, "sync_files", held_sync)
    return release, syncing


def test_training_goes_on_while_the_commit_runs_and_the_checkpoint_holds_the_saved_state(tmp_path, monkeypatch):
    release, syncing = held_background_sync(monkeypatch)
    accelerator = Accelerator()
    model, optimizer = prepared(accelerator)
    at_save = params(model)
    directory = Path(accelerator.save_state(tmp_path / "ckpt"))
    assert syncing.wait(30)
    # written but not committed: invisible, and the run goes on changing its parameters
    assert not directory.exists() and hidden_leftovers(tmp_path)[0].startswith(layout.TEMP_PREFIX)
    step(accelerator, model, optimizer)
    release.set()
    accelerator.wait_for_everyone()
    manifest = layout.read_manifest(directory)
    assert manifest["world_size"] == 1 and hidden_leftovers(tmp_path) == []
    assert not any(name.startswith(".") for name in (p.name for p in directory.iterdir()))  # no markers kept
    accelerator.load_state(directory)
    assert all(torch.equal(a, b) for a, b in zip(at_save, model.parameters()))


def test_a_failed_commit_is_raised_at_the_next_wait_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("DRIVETRAIN_CHECKPOINT_BACKGROUND", "1")
    accelerator = Accelerator()
    model, optimizer = prepared(accelerator)
    good = Path(accelerator.save_state(tmp_path / "ckpt"))
    accelerator.wait_for_everyone()
    good_params = params(model)
    step(accelerator, model, optimizer)

    real_fsync = commit._fsync_path

    def failing_fsync(path, directory=False):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(commit, "_fsync_path", failing_fsync)
    accelerator.save_state(tmp_path / "ckpt")  # returns: the files were written
    with pytest.raises(CheckpointError, match=r"was not completed and is not on disk \(the previous one is intact\)"
                                              r".*Input/output error"):
        accelerator.wait_for_everyone()
    assert "was not completed" in caplog.text  # logged when it happened, too
    assert hidden_leftovers(tmp_path) == []  # the half-committed directory was removed
    monkeypatch.setattr(commit, "_fsync_path", real_fsync)
    accelerator.load_state(good)
    assert all(torch.equal(a, b) for a, b in zip(good_params, model.parameters()))
    accelerator.wait_for_everyone()  # the failure was reported once; nothing pending now


def test_a_commit_whose_directory_was_deleted_does_not_fail_later_saves_elsewhere(tmp_path, monkeypatch, caplog):
    release, syncing = held_background_sync(monkeypatch)
    accelerator = Accelerator()
    prepared(accelerator)
    accelerator.save_state(tmp_path / "gone" / "ckpt")
    assert syncing.wait(30)
    shutil.rmtree(tmp_path / "gone")  # the caller's temporary directory, removed under the commit
    release.set()
    commit.pending().wait()
    directory = Path(accelerator.save_state(tmp_path / "kept" / "ckpt"))
    accelerator.wait_for_everyone()
    assert layout.read_manifest(directory)["files"] and "directory it was going into is gone" in caplog.text


def test_by_default_the_checkpoint_is_in_place_and_rotated_when_save_state_returns(tmp_path, monkeypatch):
    from drivetrain import ProjectConfiguration

    config = ProjectConfiguration(project_dir=str(tmp_path / "auto"), automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(project_config=config)
    prepared(accelerator)
    names = []
    for _ in range(3):
        accelerator.save_state()
        names.append(sorted(p.name for p in (tmp_path / "auto" / "checkpoints").iterdir()))
    assert names == [["checkpoint_0"], ["checkpoint_0", "checkpoint_1"], ["checkpoint_1", "checkpoint_2"]]
    assert commit.pending() is None  # nothing left running that a later call would have to wait for


def test_blocking_commits_raise_their_failure_from_save_state(tmp_path, monkeypatch):
    accelerator = Accelerator()
    prepared(accelerator)
    directory = Path(accelerator.save_state(tmp_path / "ckpt"))
    assert layout.read_manifest(directory)["files"]  # in place the moment save_state returns
    monkeypatch.setattr(commit, "_fsync_path", lambda path, directory=False: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(CheckpointError, match="No space left on device"):
        accelerator.save_state(tmp_path / "second")
    assert not (tmp_path / "second").exists()


def test_rotation_and_tracker_notices_happen_after_the_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("DRIVETRAIN_CHECKPOINT_BACKGROUND", "1")
    from drivetrain import ProjectConfiguration
    from drivetrain.tracking import GeneralTracker

    class Recorder(GeneralTracker):
        name = "recorder"
        requires_logging_directory = False

        def __init__(self):
            super().__init__()
            self.seen = []

        def on_checkpoint(self, event, directory):
            # told only once the checkpoint is in place and complete, on the training thread
            assert threading.current_thread() is threading.main_thread()
            self.seen.append((event, Path(directory).name, layout.is_complete(Path(directory))))

    recorder = Recorder()
    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(project_config=config, log_with=[recorder])
    accelerator.init_trackers("run")
    model, optimizer = prepared(accelerator)
    for _ in range(3):
        accelerator.save_state()
        step(accelerator, model, optimizer)
    commit.pending().wait()  # checkpoint_2 is in place; its notice waits for the training thread
    assert recorder.seen[-1] == ("save", "checkpoint_1", True)
    accelerator.log({"loss": 1.0})
    assert recorder.seen[-1] == ("save", "checkpoint_2", True)
    accelerator.load_state()
    accelerator.end_training()
    assert recorder.seen == [*(("save", f"checkpoint_{i}", True) for i in range(3)), ("load", "checkpoint_2", True)]
    assert [p.name for _n, p in layout.automatic_checkpoints(tmp_path / "checkpoints")] == ["checkpoint_1", "checkpoint_2"]


def test_a_script_that_ends_right_after_save_state_still_completes_its_checkpoint(tmp_path):
    script = textwrap.dedent(f"""
        import os
        import sys
        os.environ["DRIVETRAIN_CHECKPOINT_BACKGROUND"] = "1"
        import torch
        from drivetrain import Accelerator
        from drivetrain.checkpointing import commit
        accelerator = Accelerator()
        model = accelerator.prepare(torch.nn.Linear(512, 512))
        accelerator.save_state({str(tmp_path / "ckpt")!r})
        if sys.argv[1] == "fail":  # the last commit fails once the script has ended: nobody can raise it
            accelerator.wait_for_everyone()
            def broken(*args):
                raise OSError(5, "Input/output error")
            commit.sync_files = broken
            accelerator.save_state({str(tmp_path / "second")!r})
    """)
    result = subprocess.run([sys.executable, "-c", script, "ok"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "model_0/model.safetensors" in layout.read_manifest(tmp_path / "ckpt")["files"]
    # the launcher must not read success: the exit code says the checkpoint is missing
    result = subprocess.run([sys.executable, "-c", script, "fail"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "second was not completed: syncing the files" in result.stderr and "Input/output error" in result.stderr
    assert not (tmp_path / "second").exists() and layout.read_manifest(tmp_path / "ckpt")


def test_large_states_are_split_into_files_written_and_read_side_by_side(tmp_path, monkeypatch):
    monkeypatch.setattr(io_pool, "_MIN_SHARD", 1)
    monkeypatch.setenv("DRIVETRAIN_CHECKPOINT_THREADS", "3")
    accelerator = Accelerator()
    model, optimizer = prepared(accelerator)
    saved = params(model)
    directory = Path(accelerator.save_state(tmp_path / "ckpt"))
    accelerator.wait_for_everyone()
    files = layout.read_manifest(directory)["files"]
    assert "model_0/model.safetensors.index.json" in files
    assert sum(name.startswith("model_0/model-") for name in files) > 1
    assert sum(name.startswith("optimizer_0-") for name in files) > 1
    expected_moments = [s["exp_avg"].clone() for s in optimizer.state_dict()["state"].values()]
    step(accelerator, model, optimizer)
    accelerator.load_state(directory)
    assert all(torch.equal(a, b) for a, b in zip(saved, model.parameters()))
    moments = [s["exp_avg"] for s in optimizer.state_dict()["state"].values()]
    assert all(torch.equal(a, b) for a, b in zip(expected_moments, moments))


def test_state_trees_shard_and_older_single_file_trees_still_load(tmp_path):
    tree = {"a": torch.arange(10), "b": [torch.ones(3, 3), {"c": torch.zeros(5, dtype=torch.bfloat16)}], "n": 3}
    with FileJobs(threads=2) as jobs:
        names = save_tree(tree, tmp_path / "big", jobs=jobs, shard_bytes=40)
    assert names[-1] == "big.json" and len(names) == 4 and names[0] == "big-00001-of-00003.safetensors"
    back = load_tree(tmp_path / "big")
    assert torch.equal(back["a"], tree["a"]) and torch.equal(back["b"][1]["c"], tree["b"][1]["c"]) and back["n"] == 3
    # format 1: one "<prefix>.safetensors" announced by "tensors": true
    save_tree(tree, tmp_path / "old")
    document = json.loads((tmp_path / "old.json").read_text())
    del document["files"]
    (tmp_path / "old.json").write_text(json.dumps(dict(document, format="drivetrain-tree/1", tensors=True)))
    assert torch.equal(load_tree(tmp_path / "old")["b"][0], torch.ones(3, 3))
    # a listed file outside the checkpoint directory is refused
    (tmp_path / "old.json").write_text(json.dumps(dict(document, files=["../elsewhere.safetensors"])))
    with pytest.raises(CheckpointError, match=r"lists .\.\./elsewhere\.safetensors., outside"):
        load_tree(tmp_path / "old")


def test_file_jobs_finish_everything_before_raising_the_first_error():
    finished = []

    def job(n):
        if n == 1:
            raise CheckpointError("job 1 failed")
        finished.append(n)

    jobs = FileJobs(threads=2)
    for n in range(6):
        jobs.submit(job, n)
    with pytest.raises(CheckpointError, match="job 1 failed"):
        jobs.close()
    assert sorted(finished) == [0, 2, 3, 4, 5]
    assert shard_bytes(10 * 2**30, 4) == 10 * 2**30 // 16 and shard_bytes(100, 4) == 64 * 2**20
    assert shard_bytes(500, 1) == 500


def test_markers_report_a_failed_or_silent_process(tmp_path):
    (tmp_path / commit.SYNCED_MARKER.format(rank=1)).write_text("")
    commit.wait_for_markers(tmp_path, [1], timeout=1)
    (tmp_path / commit.FAILED_MARKER.format(rank=2)).write_text("[Errno 5] Input/output error")
    with pytest.raises(CheckpointError, match=r"process 2 could not sync its files \(\[Errno 5\]"):
        commit.wait_for_markers(tmp_path, [1, 2], timeout=1)
    with pytest.raises(CheckpointError, match=r"^rank 3 did not answer: its files were not synced within 0.05 s "
                                              r"\(the run's collective timeout\); look at rank 3 .*InitProcessGroup"
                                              r"Kwargs\(timeout=.*DRIVETRAIN_CHECKPOINT_COMMIT_TIMEOUT"):
        commit.wait_for_markers(tmp_path, [3], timeout=0.05)
    with pytest.raises(CheckpointError, match=r"^ranks 3, 4 did not answer: their files"):
        commit.wait_for_markers(tmp_path, [3, 4], timeout=0.05)


def test_every_wait_on_a_peer_is_bounded_by_the_runs_collective_timeout(monkeypatch):
    from datetime import timedelta
    from types import SimpleNamespace

    from drivetrain import InitProcessGroupKwargs
    from drivetrain.checkpointing import peers, run_state

    accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=15))])
    # the commit's wait for the other processes' files: the run's timeout, not a half-hour of its own
    assert run_state._publication(accelerator.session, [({}, None, 0)]).timeout == 15
    monkeypatch.setenv("DRIVETRAIN_CHECKPOINT_COMMIT_TIMEOUT", "600")  # slow disks: the commit alone waits longer
    assert run_state._publication(accelerator.session, [({}, None, 0)]).timeout == 600

    # a collective of a save or load that a peer never answers: one line with the timeout and the fix
    def timed_out(obj):
        raise RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 15000ms for recv operation\n"
                           "Exception raised from wait at ...")

    state = SimpleNamespace(process_index=0, collective_timeout=timedelta(seconds=15),
                            collectives=SimpleNamespace(all_gather_object=timed_out, barrier=lambda: timed_out(None)),
                            wait_for_everyone=lambda: timed_out(None))
    for wait in (lambda: peers.gather(state, None, "saving /ck"), lambda: peers.barrier(state, "saving /ck")):
        with pytest.raises(CheckpointError) as raised:
            wait()
        assert str(raised.value).startswith("saving /ck: rank 0 waited for the other processes and one did not answer "
                                            "within the run's collective timeout (15 s): [gloo/transport/tcp/unbound_"
                                            "buffer.cc:81] Timed out waiting 15000ms for recv operation; look at the "
                                            "rank the launcher names")
        assert "\n" not in str(raised.value)
