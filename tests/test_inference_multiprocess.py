"""Pipeline-parallel inference (prepare_pippy) on 2 real processes, launched as users launch it."""

from __future__ import annotations

import re

import pytest
from launching import assert_ok, launch

pytestmark = pytest.mark.multiprocess


def test_prepare_pippy_matches_the_whole_model_on_one_process():
    result = launch("check_pippy.py")
    assert_ok(result)
    assert sorted(re.findall(r"pippy ok on process (\d)", result.stdout)) == ["0", "1"]
