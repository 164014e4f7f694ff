"""A script written for Accelerate runs under `drivetrain launch` with only its imports renamed."""

from __future__ import annotations

import json

import pytest

from launching import assert_ok, launch

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def test_accelerate_style_script_runs_on_two_processes(tmp_path):
    result = launch("accelerate_style.py", str(tmp_path), num_processes=2)
    assert_ok(result)
    summary = json.loads((tmp_path / "result.json").read_text())
    assert summary["num_processes"] == 2
    ranks = sorted(summary["ranks"], key=lambda row: row["rank"])
    # find_executable_batch_size shrank 32 by a tenth per retry down to 8 on every rank; 64 samples / 2 ranks / 8 = 4 steps
    assert [row["rank"] for row in ranks] == [0, 1]
    assert all(row["tried"] == [32, 28, 25, 22, 19, 17, 15, 13, 11, 9, 8] and row["steps"] == 4 for row in ranks)
    rows = json.loads((tmp_path / "metrics.json").read_text())
    assert rows[0] == {"config": {"lr": 0.1}} and [row["step"] for row in rows[1:]] == [0, 1, 2, 3]
