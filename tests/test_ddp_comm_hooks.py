"""DDP communication hooks that cannot run where they are asked for are refused before training."""

from __future__ import annotations

import pytest
import torch
from drivetrain_ddp.options import DistributedDataParallelKwargs
from drivetrain_ddp.wrap import _register_comm_hook

from drivetrain.errors import ConfigError


@pytest.mark.parametrize("hook", ["power_sgd", "batched_power_sgd"])
def test_power_sgd_on_cpu_processes_of_a_cuda_machine_is_refused_with_the_fix(monkeypatch, hook):
    # torch's PowerSGD hook synchronizes CUDA on the CPU gradients' device and fails in the
    # first backward; the multi-process check trains it for real where no CUDA device exists
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES="):
        _register_comm_hook(None, DistributedDataParallelKwargs(comm_hook=hook), torch.device("cpu"))
