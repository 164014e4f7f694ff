"""Crash injection: SIGKILL during many saves never leaves a checkpoint that cannot be loaded."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import clean_environ

from drivetrain.checkpointing import layout
from drivetrain.checkpointing.model_files import read_model_files
from drivetrain.checkpointing.tree_io import load_tree

SCRIPT = Path(__file__).resolve().parent / "scripts" / "checkpoint_crash.py"
pytestmark = pytest.mark.multiprocess


def _clean_env() -> dict[str, str]:
    return clean_environ(DRIVETRAIN_CHECKPOINT_FSYNC="1")


def _run_and_kill(command: list[str], saves_before_kill: int, rng: random.Random) -> list[str]:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_clean_env())
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while sum(line.startswith("SAVED") for line in lines) < saves_before_kill:
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError("the training script stopped before being killed:\n" + "".join(lines))
        time.sleep(0.01)
    time.sleep(rng.uniform(0, 0.25))  # land anywhere in the next step or save
    for victim in [*psutil.Process(process.pid).children(recursive=True), psutil.Process(process.pid)]:
        try:
            victim.kill()
        except psutil.NoSuchProcess:
            pass
    process.wait(timeout=30)
    return lines


def _check_every_visible_checkpoint_loads(root: Path) -> int:
    visible = [p for p in root.iterdir() if not p.name.startswith(".")]
    assert visible, "no checkpoint was completed"
    for directory in visible:
        manifest = layout.read_manifest(directory)  # raises on a missing manifest or truncated file
        read_model_files(directory / "model_0")
        load_tree(directory / "optimizer_0")
        for rank in range(manifest["world_size"]):
            load_tree(directory / f"random_states_{rank}")
    return len(visible)


def test_sigkill_during_saves_never_leaves_a_broken_checkpoint(tmp_path):
    rng = random.Random(1234)
    single = [sys.executable, str(SCRIPT), str(tmp_path / "one")]
    double = [sys.executable, "-m", "drivetrain", "launch", "--cpu", "--num-processes", "2", str(SCRIPT),
              str(tmp_path / "two")]
    kills = 0
    for command, project, rounds in ((single, tmp_path / "one", 8), (double, tmp_path / "two", 3)):
        for round_ in range(rounds):
            # save_state returns before its commit; the next save waits for it, so after two
            # "SAVED" lines at least one checkpoint is in place
            lines = _run_and_kill(command, saves_before_kill=rng.randint(2, 5), rng=rng)
            kills += 1
            if round_:
                assert any(line.startswith("RESUMED") for line in lines), "".join(lines)
            # rotation runs after the new checkpoint is published: a kill in between leaves one extra
            assert _check_every_visible_checkpoint_loads(project / "checkpoints") <= 3 + 1
    print(f"crash injection: {kills} kills, every visible checkpoint loaded after each")
