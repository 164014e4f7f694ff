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


class _Lines:
    """The lines a process prints, read on a thread as they come."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process, self.lines = process, []
        threading.Thread(target=lambda: self.lines.extend(iter(process.stdout.readline, "")), daemon=True).start()

    def wait_for(self, done, since: int = 0) -> list[str]:
        """The lines from ``since`` on, once ``done(them)`` holds (within 2 minutes)."""
        deadline = time.monotonic() + 120
        while not done(self.lines[since:]):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("the training script stopped before being killed:\n" + "".join(self.lines))
            time.sleep(0.01)
        return self.lines[since:]


def _saved(count: int):
    return lambda lines: sum(line.startswith("SAVED") for line in lines) >= count


def _kill_tree(pid: int) -> None:
    for victim in [*psutil.Process(pid).children(recursive=True), psutil.Process(pid)]:
        try:
            victim.kill()
        except psutil.NoSuchProcess:
            pass


def _run_and_kill(command: list[str], saves_before_kill: int, rng: random.Random) -> list[str]:
    """A fresh run of ``command``, killed with every process it started."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_clean_env())
    output = _Lines(process)
    output.wait_for(_saved(saves_before_kill))
    time.sleep(rng.uniform(0, 0.25))  # land anywhere in the next step or save
    _kill_tree(process.pid)
    process.wait(timeout=30)
    return output.lines


class _Forking:
    """One process of the script in ``--forking`` mode: each run is a child forked from it, so the
    rounds pay Python's and torch's imports once. The child is killed as a fresh process would be."""

    def __init__(self, project: Path) -> None:
        self.process = subprocess.Popen([sys.executable, str(SCRIPT), str(project), "--forking"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=_clean_env())
        self.output = _Lines(self.process)

    def run_and_kill(self, saves_before_kill: int, rng: random.Random) -> list[str]:
        since = len(self.output.lines)
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        child = self.output.wait_for(lambda lines: any(line.startswith("CHILD") for line in lines), since)
        pid = int(next(line for line in child if line.startswith("CHILD")).split()[1])
        # a child killed in the middle of a line leaves it without its newline, and the parent's
        # ENDED is written after it on the same line
        def ended(lines: list[str]) -> bool:
            return any(line.endswith(f"ENDED {pid}\n") for line in lines)

        lines = self.output.wait_for(lambda lines: _saved(saves_before_kill)(lines) or ended(lines), since)
        assert not ended(lines), "the training child stopped before being killed:\n" + "".join(lines)
        time.sleep(rng.uniform(0, 0.25))  # land anywhere in the next step or save
        _kill_tree(pid)
        return self.output.wait_for(ended, since)

    def __enter__(self) -> "_Forking":
        return self

    def __exit__(self, *exc) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


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
    double = [sys.executable, "-m", "drivetrain", "launch", "--cpu", "--num-processes", "2", str(SCRIPT),
              str(tmp_path / "two")]
    kills = 0
    with _Forking(tmp_path / "one") as single:
        runs = [(single.run_and_kill, tmp_path / "one", 8),
                (lambda count, rng: _run_and_kill(double, count, rng), tmp_path / "two", 2)]
        for run_and_kill, project, rounds in runs:
            for round_ in range(rounds):
                # save_state returns before its commit; the next save waits for it, so after two
                # "SAVED" lines at least one checkpoint is in place
                lines = run_and_kill(rng.randint(2, 5), rng)
                kills += 1
                if round_:
                    assert any(line.startswith("RESUMED") for line in lines), "".join(lines)
                # rotation runs after the new checkpoint is published: a kill in between leaves one extra
                assert _check_every_visible_checkpoint_loads(project / "checkpoints") <= 3 + 1
    print(f"crash injection: {kills} kills, every visible checkpoint loaded after each")
