"""drivetrain.utils operations across 2 real processes (gloo), launched as users launch them."""

from __future__ import annotations

import re

import pytest
from launching import assert_ok, launch

pytestmark = pytest.mark.multiprocess


def test_operations_across_two_processes():
    result = launch("check_operations.py")
    assert_ok(result)
    assert sorted(re.findall(r"CHECK-OPERATIONS-OK rank (\d)", result.stdout)) == ["0", "1"]


def test_debug_mode_turns_a_shape_mismatch_into_an_error_on_every_rank():
    result = launch("check_debug_mode.py", env={"DRIVETRAIN_DEBUG_MODE": "1"}, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    for rank in (0, 1):
        assert re.search(rf"rank {rank} \(local rank {rank}.*DistributedOperationException: gather\(\) needs the same "
                         r"shapes", output), output
        assert re.search(rf"rank {rank} left gather after \d+\.\d+s", output), output
    assert "rank 0: {'logits': '[2, 5] float32'}" in output and "rank 1: {'logits': '[3, 5] float32'}" in output
