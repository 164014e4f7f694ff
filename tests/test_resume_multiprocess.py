"""Exact resume: N steps straight == k steps, SIGKILL of every process, resume, N-k steps."""

from __future__ import annotations

import shutil

import pytest
import torch
from launching import assert_ok, launch

pytestmark = pytest.mark.multiprocess
TOTAL, INTERRUPT_AT = 23, 13  # 10 micro-steps per epoch: stops mid-epoch and mid-accumulation window


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """One two-process run SIGKILLed at step INTERRUPT_AT, launched once for this module: its
    result and its directory (checkpoint, what each rank saw). Tests work on a copy."""
    directory = tmp_path_factory.mktemp("interrupted")
    return launch("check_resume.py", "interrupt", str(INTERRUPT_AT), str(directory)), directory


def test_killed_and_resumed_run_is_bitwise_identical(tmp_path, interrupted):
    straight_dir, resumed_dir = tmp_path / "straight", tmp_path / "resumed"
    straight_dir.mkdir()
    assert_ok(launch("check_resume.py", "straight", str(TOTAL), str(straight_dir)))
    killed, directory = interrupted
    assert killed.returncode != 0 and "SIGKILL" in killed.stderr, killed.stderr
    shutil.copytree(directory, resumed_dir)
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


def test_a_two_process_checkpoint_in_one_process(tmp_path, fresh_state, interrupted):
    """Model, optimizer and a mid-epoch loader position of a DDP run load into one process."""
    from torch.utils.data import DataLoader, TensorDataset

    from drivetrain import Accelerator

    killed, directory = interrupted
    assert killed.returncode != 0
    tmp_path = shutil.copytree(directory, tmp_path / "run")
    saved = torch.load(tmp_path / "interrupt_0.pt")

    def objects():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        return model, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, 2, gamma=0.9)

    class Progress:
        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            self.state = state

    accelerator = Accelerator()
    model, optimizer, scheduler = accelerator.prepare(*objects())
    accelerator.register_for_checkpointing(Progress())
    accelerator.load_state(tmp_path / "checkpoint")
    for a, b in zip(model.parameters(), saved["params"]):
        assert torch.equal(a.cpu(), b)  # a CPU job's checkpoint resumes on this machine's device
    assert optimizer.state_dict()["state"]  # AdamW moments came back

    # the loader's position is kept in samples: mid-epoch, it resumes on one process too
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(40)), batch_size=4, shuffle=True))
    accelerator.load_state(tmp_path / "checkpoint")
    position = loader.state_dict()
    assert position["batches_yielded"] > 0 and position["batches_yielded"] % 2 == 0  # 2 of ours per step of 2
    assert position["samples_yielded"] == 4 * position["batches_yielded"]
