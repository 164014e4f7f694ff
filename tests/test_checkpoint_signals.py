"""A save stopped by a signal: nothing it left stays behind once the next save or load runs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import clean_environ

from drivetrain import Accelerator
from drivetrain.checkpointing import leftovers
from drivetrain.utils import ProjectConfiguration

pytestmark = pytest.mark.usefixtures("fresh_state")

# Saves checkpoint_<N>, then starts checkpoint_<N+1> and stops inside it (a custom object's state_dict
# that waits), its temporary directory made, until the test signals it.
STOPPED_MID_SAVE = r"""
import sys, time
import torch
from drivetrain import Accelerator
from drivetrain.utils import ProjectConfiguration

class WaitsInsideTheSave:
    def state_dict(self):
        print("INSIDE-SAVE", flush=True)
        time.sleep(120)
        return {}

    def load_state_dict(self, state):
        pass

accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
    project_dir=sys.argv[1], automatic_checkpoint_naming=True, iteration=int(sys.argv[2])))
model = accelerator.prepare(torch.nn.Linear(2, 2))
accelerator.save_state()
accelerator.register_for_checkpointing(WaitsInsideTheSave())
accelerator.save_state()
print("SAVE-ENDED", flush=True)
"""


def stop_mid_save(project: Path, signum: int, iteration: int = 0) -> subprocess.CompletedProcess:
    process = subprocess.Popen([sys.executable, "-c", STOPPED_MID_SAVE, str(project), str(iteration)],
                               stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=clean_environ())
    try:
        line = process.stdout.readline()
        assert line.strip() == "INSIDE-SAVE", line + process.stderr.read()
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    return subprocess.CompletedProcess(process.args, process.returncode, line + out, err)


def temporaries(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir() if path.name.startswith("."))


def restart(project: Path, iteration: int) -> tuple[Accelerator, torch.nn.Module]:
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
        project_dir=str(project), automatic_checkpoint_naming=True, iteration=iteration))
    return accelerator, accelerator.prepare(torch.nn.Linear(2, 2))


def test_a_save_killed_by_sigterm_leaves_a_folder_the_next_load_or_save_removes(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    stopped = stop_mid_save(tmp_path, signal.SIGTERM)
    assert stopped.returncode == -signal.SIGTERM and "SAVE-ENDED" not in stopped.stdout
    left = temporaries(checkpoints)
    assert len(left) == 1 and left[0].startswith(".tmp-checkpoint_1-"), left
    accelerator, _model = restart(tmp_path, iteration=1)
    accelerator.load_state()  # the newest complete checkpoint, checkpoint_0
    assert temporaries(checkpoints) == [] and sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint_0"]

    stop_mid_save(tmp_path, signal.SIGTERM, iteration=1)  # checkpoint_1 saved, checkpoint_2 stopped
    assert [name[:len(".tmp-checkpoint_2-")] for name in temporaries(checkpoints)] == [".tmp-checkpoint_2-"]
    accelerator, _model = restart(tmp_path, iteration=2)
    accelerator.save_state()
    assert temporaries(checkpoints) == []
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint_0", "checkpoint_1", "checkpoint_2"]
    assert leftovers.WRITER not in os.listdir(checkpoints / "checkpoint_2")  # the record goes before publishing


def test_ctrl_c_during_a_save_removes_its_folder_at_once(tmp_path):
    stopped = stop_mid_save(tmp_path, signal.SIGINT)
    assert stopped.returncode != 0 and "KeyboardInterrupt" in stopped.stderr
    assert temporaries(tmp_path / "checkpoints") == []
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["checkpoint_0"]


def test_a_folder_whose_writer_may_still_run_is_kept(tmp_path):
    accelerator, _model = restart(tmp_path, iteration=0)
    accelerator.save_state()
    checkpoints = tmp_path / "checkpoints"
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(finished.stdout)
    records = {
        ".tmp-checkpoint_1-alive": {"pid": os.getpid()},  # this process: a save in progress
        ".tmp-checkpoint_1-elsewhere": {"pid": dead_pid, "host": socket.gethostname() + "-other"},
        ".tmp-checkpoint_1-dead": {"pid": dead_pid},
    }
    for name, fields in records.items():
        (checkpoints / name).mkdir()
        leftovers.record_writer(checkpoints / name)
        record = json.loads((checkpoints / name / leftovers.WRITER).read_text())
        record.update(fields)
        (checkpoints / name / leftovers.WRITER).write_text(json.dumps(record))
    (checkpoints / ".tmp-not-ours").mkdir()  # another tool's folder, no record: left to the age rule
    accelerator.save_state()
    assert temporaries(checkpoints) == [".tmp-checkpoint_1-alive", ".tmp-checkpoint_1-elsewhere", ".tmp-not-ours"]
