"""Prepared data loaders across 2 real processes (gloo), launched as users launch them."""

from __future__ import annotations

import re

import pytest
from launching import assert_ok, launch

pytestmark = pytest.mark.multiprocess


def test_data_loading_across_two_processes():
    result = launch("check_data_loading.py")
    assert_ok(result)
    assert sorted(re.findall(r"CHECK-DATA-LOADING-OK rank (\d)", result.stdout)) == ["0", "1"], result.stdout
