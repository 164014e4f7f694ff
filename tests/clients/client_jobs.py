"""Helpers of the client suite (a test module imports the ``alias`` fixture from here). The suite: libraries that import `accelerate` themselves (transformers' Trainer, PEFT,
TRL, `from_pretrained(device_map=...)`) run for real on drivetrain through the alias, on 2 CPU
processes where the process boundary matters. Slow (minutes): run it on its own with
`python -m pytest -q tests/clients` (the main suite does not collect this folder)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from alias_env import AliasEnv, make_alias_env
from conftest import clean_environ

SCRIPTS = Path(__file__).resolve().parent / "scripts"


@pytest.fixture(scope="session")
def alias(tmp_path_factory) -> AliasEnv:
    return make_alias_env(tmp_path_factory.mktemp("client-alias") / "venv")


def run_job(command: list, timeout: float = 540, **env: str) -> dict:
    """Run ``command``; return the JSON its main process printed after ``RESULT``."""
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=timeout,
                            env=clean_environ(**env))
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, f"exit code {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    assert len(lines) == 1, "only the main process reports"
    return json.loads(lines[0][len("RESULT "):])


def launch(alias: AliasEnv, launcher: str, script: str, *args: str, processes: int = 2, **env: str) -> dict:
    """``accelerate launch`` (the alias's command) or ``drivetrain launch`` of a script on CPU processes."""
    prefix = [alias.bin / "accelerate", "launch"] if launcher == "accelerate" else \
        [alias.python, "-m", "drivetrain", "launch"]
    return run_job([*prefix, "--cpu", "--num_processes", str(processes), SCRIPTS / script, *args], **env)
