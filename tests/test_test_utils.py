"""drivetrain.test_utils at Accelerate's paths: local datasets and models, skip decorators made
from the installed platforms and probes, launch commands and subprocess helpers."""

from __future__ import annotations

import sys
import unittest

import pytest
import torch


def test_regression_dataset_and_model_learn_the_line():
    from drivetrain.test_utils import RegressionDataset, RegressionModel
    from drivetrain.test_utils.training import RegressionDataset as same

    assert RegressionDataset is same
    data = RegressionDataset(a=2, b=3, length=96, seed=42)
    again = RegressionDataset(a=2, b=3, length=96, seed=42)
    assert len(data) == 96 and data[5]["x"] == again[5]["x"] and data[5]["y"] == again[5]["y"]
    model = RegressionModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    for _ in range(30):
        for batch in loader:
            loss = torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert abs(model.a.item() - 2) < 0.1 and abs(model.b.item() - 3) < 0.1


def test_mocked_dataloaders_are_local_and_shaped_for_the_examples():
    from drivetrain.test_utils.training import mocked_dataloaders, mocked_dataloaders_for_autoregressive_models

    train, evaluation = mocked_dataloaders(None, batch_size=8)
    batch = next(iter(train))
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels"}
    assert batch["input_ids"].shape == batch["attention_mask"].shape and batch["labels"].shape == (8,)
    assert set(batch["labels"].tolist()) <= {0, 1} and len(evaluation.dataset) == 32
    first = [b["input_ids"] for b in mocked_dataloaders(None, batch_size=8)[1]]
    assert all(torch.equal(a, b) for a, b in zip(first, [b["input_ids"] for b in evaluation]))  # same data each time
    causal = next(iter(mocked_dataloaders_for_autoregressive_models(None, batch_size=4)[1]))
    padded = causal["attention_mask"] == 0
    assert torch.equal(causal["labels"][~padded], causal["input_ids"][~padded]) and (causal["labels"][padded] == -100).all()


def test_mocked_batches_move_themselves_as_tokenizer_batches_do():
    # The example scripts call `batch.to(accelerator.device)` on every batch, prepared or not.
    from drivetrain import Accelerator
    from drivetrain.test_utils.training import mocked_dataloaders, mocked_dataloaders_for_autoregressive_models

    train, evaluation = mocked_dataloaders(None, batch_size=4)
    for loader in (train, mocked_dataloaders_for_autoregressive_models(None, batch_size=4)[0]):
        batch = next(iter(loader))
        assert batch.to("cpu") is batch and batch["input_ids"].device.type == "cpu"
    accelerator = Accelerator(cpu=True)
    prepared = accelerator.prepare(evaluation)
    batch = next(iter(prepared))
    moved = batch.to(accelerator.device)
    assert moved["labels"].shape == (4,) and moved["input_ids"].device == accelerator.device
    assert type(moved) is type(next(iter(evaluation)))


def _skipped(decorator) -> bool:
    @decorator
    class Case(unittest.TestCase):
        def test(self):
            pass

    return getattr(Case, "__unittest_skip__", False)


def test_require_decorators_follow_what_is_installed(monkeypatch):
    from drivetrain.selection.versions import is_torch_version
    from drivetrain.test_utils import testing

    assert not _skipped(testing.require_cpu) or testing._accelerator_count() > 0
    assert _skipped(testing.require_multi_gpu) == (testing._accelerator_count() < 2)
    # a library probe: transformers is a test dependency, so present
    assert not _skipped(testing.require_transformers)
    assert _skipped(testing.require_non_cpu) == (testing._accelerator_count() == 0)
    assert _skipped(testing.require_torch_min_version(version="99.0"))
    assert not _skipped(testing.require_torch_min_version(version="2.0"))
    monkeypatch.setenv("RUN_SLOW", "0")
    assert _skipped(testing.slow)
    # version gates of Accelerate's FSDP2 and TP suites, and "either" gates
    assert _skipped(testing.require_fsdp2) == (not is_torch_version(">=", "2.5.0"))
    assert not _skipped(testing.require_tp) or not is_torch_version(">=", "2.3.0")
    assert _skipped(testing.require_multi_gpu_or_xpu) == (testing._accelerator_count() < 2)
    assert not _skipped(testing.require_cpu_or_cuda)  # the CPU is always there
    assert _skipped(testing.require_cuda_or_xpu) == (testing._current_platform() not in ("cuda", "xpu"))
    with pytest.raises(AttributeError, match="require_no_such_thing"):
        testing.require_no_such_thing  # noqa: B018
    from drivetrain.test_utils import require_cpu

    assert require_cpu is testing.require_cpu


def test_launch_command_and_subprocess_helpers(capsys):
    from drivetrain.test_utils import testing

    command = testing.get_launch_command(num_processes=2, monitor_interval=0.1, cpu=True, debug=False)
    assert command == [sys.executable, "-m", "drivetrain", "launch", "--num_processes=2", "--monitor_interval=0.1",
                       "--cpu"]
    result = testing.execute_subprocess_async([sys.executable, "-c", "print('hi')"], quiet=True, echo=False)
    assert result.returncode == 0 and result.stdout == ["hi"]
    with pytest.raises(RuntimeError, match="boom"):
        testing.execute_subprocess_async([sys.executable, "-c", "import sys; sys.exit('boom')"], quiet=True)
    with testing.assert_exception(ValueError, "bad"):
        raise ValueError("a bad value")
    with pytest.raises(AssertionError, match="was not raised"):
        with testing.assert_exception(ValueError):
            pass
    assert testing.capture_call_output(print, "x") == "x\n"
    assert testing.path_in_accelerate_package("test_utils").is_dir()
    assert testing.are_the_same_tensors(torch.arange(3))


def test_get_backend_names_the_detected_device_as_accelerate_does(monkeypatch):
    from drivetrain.test_utils import testing
    from drivetrain.test_utils.testing import get_backend

    device_type, count, allocated = get_backend()
    assert (device_type, count) == (testing.torch_device, testing.device_count)
    assert isinstance(allocated(), int) and allocated() >= 0
    # on a machine without an accelerator: Accelerate's ("cpu", 1, <0>)
    monkeypatch.setattr(testing, "_current_platform", lambda: "cpu")
    device_type, count, allocated = get_backend()
    assert (device_type, count, allocated()) == ("cpu", 1, 0)
