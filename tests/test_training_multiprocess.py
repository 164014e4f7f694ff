"""The training step on 2 real processes, and the README's example, as users launch them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from launching import assert_ok, launch

pytestmark = pytest.mark.multiprocess
ROOT = Path(__file__).resolve().parent.parent


def test_training_step_across_two_processes(tmp_path):
    result = launch("check_training.py", str(tmp_path))
    assert_ok(result)
    assert result.stdout.count("CHECK-TRAINING-OK") == 2
    logs = result.stdout + result.stderr
    assert logs.count("LOG-MAIN-ONLY") == 1 and "LOG-MAIN-ONLY from 0" in logs
    everywhere = re.findall(r"LOG-EVERYWHERE from (\d)", logs)
    assert everywhere == ["0", "1"]  # in_order: rank by rank


def test_example_trains_and_reports_accuracy():
    result = launch(ROOT / "examples" / "train_classifier.py", "--epochs", "6")
    assert_ok(result)
    accuracy = float(re.search(r"^accuracy: ([0-9.]+)$", result.stdout, re.M).group(1))
    assert accuracy > 0.9, result.stdout
    assert re.search(r"^evaluated 1001 samples$", result.stdout, re.M), result.stdout
