"""Accelerate's reporting members of ``Accelerator``: handlers, precision, devices, trackers, LOMO."""

from __future__ import annotations

import pytest
import torch

from drivetrain import Accelerator, AutocastKwargs, GradScalerKwargs, InitProcessGroupKwargs, ProfileKwargs
from drivetrain.errors import ConfigError

pytestmark = pytest.mark.usefixtures("fresh_state")


def test_handlers_are_the_ones_given():
    autocast, init, profile = AutocastKwargs(enabled=False), InitProcessGroupKwargs(), ProfileKwargs()
    accelerator = Accelerator(cpu=True, kwargs_handlers=[autocast, init, profile])
    assert accelerator.autocast_handler is autocast and accelerator.init_handler is init
    assert accelerator.profile_handler is profile
    assert accelerator.scaler_handler is None and accelerator.ddp_handler is None


def test_scaler_handler_and_native_amp():
    scaler = GradScalerKwargs(init_scale=1024.0)
    accelerator = Accelerator(cpu=True, mixed_precision="bf16", kwargs_handlers=[scaler])
    assert accelerator.scaler_handler is scaler and accelerator.native_amp is True


def test_plain_run_reports_no_amp_one_device_and_saves():
    accelerator = Accelerator(cpu=True)
    assert accelerator.native_amp is False and accelerator.multi_device is False
    assert accelerator.should_save_model is True and accelerator.log_with == []
    assert accelerator.has_lomo_optimizer is False


def test_log_with_lists_the_selected_trackers(tmp_path):
    from drivetrain.tracking import get_available_trackers

    if "tensorboard" not in get_available_trackers():
        pytest.skip("tensorboard is not installed")
    accelerator = Accelerator(cpu=True, log_with="tensorboard", project_dir=str(tmp_path))
    assert accelerator.log_with == ["tensorboard"]


def test_lomo_backward_without_a_lomo_optimizer_says_what_it_needs():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    model, _optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ConfigError, match="Lomo"):
        accelerator.lomo_backward(model(torch.ones(1, 2, device=accelerator.device)).sum(), 0.1)
