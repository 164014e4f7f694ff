"""Exact resume: N steps straight == k steps, SIGKILL of every process, resume, N-k steps."""

from __future__ import annotations

import pytest
import torch
from launching import assert_ok, launch

pytestmark = pytest.mark.multiprocess
TOTAL, INTERRUPT_AT = 23, 13  # 10 micro-steps per epoch: stops mid-epoch and mid-accumulation window


def test_killed_and_resumed_run_is_bitwise_identical(tmp_path):
    straight_dir, resumed_dir = tmp_path / "straight", tmp_path / "resumed"
    straight_dir.mkdir()
    resumed_dir.mkdir()
    assert_ok(launch("check_resume.py", "straight", str(TOTAL), str(straight_dir)))
    killed = launch("check_resume.py", "interrupt", str(INTERRUPT_AT), str(resumed_dir))
    assert killed.returncode != 0 and "SIGKILL" in killed.stderr, killed.stderr
    assert (resumed_dir / "checkpoint" / "manifest.json").exists()
    assert_ok(launch("check_resume.py", "resume", str(TOTAL), str(resumed_dir)))
    for rank in (0, 1):
        straight = torch.load(straight_dir / f"straight_{rank}.pt")
        first = torch.load(resumed_dir / f"interrupt_{rank}.pt")
        second = torch.load(resumed_dir / f"resume_{rank}.pt")
        assert first["seen"] + second["seen"] == straight["seen"], f"rank {rank} saw other batches"
        assert first["draws"] + second["draws"] == straight["draws"], f"rank {rank}: RNG stream differs"
        for a, b in zip(second["params"], straight["params"]):
            assert torch.equal(a, b), f"rank {rank}: parameters differ after resume"
    # the two ranks saw different samples: sharding is real
    straight0 = torch.load(straight_dir / "straight_0.pt")["seen"][0]
    straight1 = torch.load(straight_dir / "straight_1.pt")["seen"][0]
    assert set(straight0).isdisjoint(straight1)
