"""Run scripts the way users do: ``drivetrain launch`` in a fresh process, with real children."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import clean_environ

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def launch(script: str | os.PathLike, *script_args: str, num_processes: int = 2, launch_args: tuple[str, ...] = (),
           env: dict[str, str] | None = None, timeout: float = 240, cwd: str | os.PathLike | None = None
           ) -> subprocess.CompletedProcess:
    """``drivetrain launch --cpu --num-processes N [launch_args] script [script_args]``.

    ``script`` is a path, or a file name under ``tests/scripts/``. Returns the completed
    process with its output; the caller asserts on it.
    """
    path = Path(script)
    if not path.is_absolute() and not path.exists():
        path = SCRIPTS / path
    full_env = clean_environ(**(env or {}))
    command = [sys.executable, "-m", "drivetrain", "launch", "--cpu", "--num-processes", str(num_processes),
               *launch_args, str(path), *script_args]
    return subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=cwd)


def assert_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
