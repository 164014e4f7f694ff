"""The xla platform for real, on torch_xla's CPU PJRT device (``PJRT_DEVICE=CPU``).

torch_xla pins its own torch, so these tests run in an environment of their own:
``scripts/setup-xla`` creates ``.venv-xla`` and ``scripts/test-xla`` runs them there. In the
main environment they are skipped with that reason.

The CPU PJRT device has one replica per process: XLA collectives between several CPU devices
or processes are not supported by torch_xla (its CPU client has no cross-replica
communication), so the replica count is 1 here and gather/reduce run their one-replica path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_environ

HAS_XLA = importlib.util.find_spec("torch_xla") is not None
pytestmark = [pytest.mark.xla,
              pytest.mark.skipif(not HAS_XLA, reason="needs torch_xla: scripts/test-xla runs these in .venv-xla "
                                                     "(created by scripts/setup-xla)")]

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture
def xla_run(fresh_state, monkeypatch):
    monkeypatch.setenv("PJRT_DEVICE", os.environ.get("PJRT_DEVICE", "CPU"))
    yield


def _model_and_data(seed: int = 0):
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    features = torch.randn(64, 4)
    dataset = torch.utils.data.TensorDataset(features, features.sum(1, keepdim=True))
    return model, torch.utils.data.DataLoader(dataset, batch_size=8)


def _compiles() -> int:
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


def test_trains_on_the_xla_device_with_a_graph_that_does_not_grow(xla_run):
    import torch
    import torch_xla

    from drivetrain import Accelerator, DistributedType
    from drivetrain_xla.loader import XlaDeviceLoader
    from drivetrain_xla.optimizer import XlaOptimizer

    accelerator = Accelerator()
    assert accelerator.state.platform.name == "xla" and accelerator.device.type == "xla"
    assert accelerator.distributed_type == DistributedType.XLA
    model, loader = _model_and_data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)  # built before prepare: must follow the model
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert isinstance(loader, XlaDeviceLoader) and isinstance(optimizer, XlaOptimizer)
    assert all(p.device.type == "xla" for group in optimizer.param_groups for p in group["params"])
    epoch_losses, compiles, ends = [], [], []
    for _epoch in range(5):
        losses = []
        for step, (x, y) in enumerate(loader):
            assert x.device.type == "xla" and y.device.type == "xla"
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            ends.append((step, accelerator.gradient_state.end_of_dataloader))
            # the step cut the graph: nothing of it is still pending on the parameters
            assert torch_xla._XLAC._get_xla_tensors_text([model[0].weight]).count("\n") < 5
        epoch_losses.append(sum(losses) / len(losses))
        compiles.append(_compiles())
    assert epoch_losses[-1] < 0.5 * epoch_losses[0], epoch_losses
    # warm-up compiles a handful of graphs; after that every step reuses them
    assert compiles[1] == compiles[2] == compiles[3] == compiles[4], compiles
    assert compiles[-1] <= 4, compiles
    # end_of_dataloader is true on the batch the user holds last, not when prefetch reached the end
    assert [step for step, end in ends if end] == [7] * 5


def test_clip_and_step_keep_the_xla_gradient_flag(xla_run):
    import torch

    from drivetrain import Accelerator

    accelerator = Accelerator()
    model, loader = _model_and_data()
    model, optimizer, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.05), loader)
    x, y = next(iter(loader))
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    assert accelerator.gradient_state.is_xla_gradients_synced is False
    norm = accelerator.clip_grad_norm_(model.parameters(), 0.01)
    assert accelerator.gradient_state.is_xla_gradients_synced is True
    before = model[0].weight.detach().cpu().clone()
    optimizer.step()
    assert accelerator.gradient_state.is_xla_gradients_synced is False
    moved = (model[0].weight.detach().cpu() - before).abs().max().item()
    assert float(norm.cpu()) > 0.01 and 0 < moved <= 0.05 * 0.01 + 1e-6


def test_collectives_of_one_replica(xla_run):
    import torch

    from drivetrain import Accelerator
    from drivetrain.utils import broadcast, gather_object
    from drivetrain_xla.collectives import XlaCollectives

    accelerator = Accelerator()
    value = torch.arange(6.0, device=accelerator.device).reshape(2, 3)
    assert accelerator.gather(value).cpu().tolist() == value.cpu().tolist()
    assert accelerator.reduce(value, "sum").cpu().tolist() == value.cpu().tolist()
    assert broadcast(value).device.type == "xla"
    assert gather_object([{"rank": accelerator.process_index}]) == [{"rank": 0}]
    collectives = XlaCollectives()  # the object a multi-replica run uses, on torch_xla's own ranks
    assert (collectives.world_size, collectives.rank) == (1, 0)
    assert collectives.all_gather_into(torch.tensor(3.0, device=accelerator.device)).cpu().tolist() == [3.0]
    assert collectives.all_gather_object("x") == ["x"] and collectives.broadcast_object_list([1, 2]) == [1, 2]
    collectives.barrier()


def test_save_and_load_state_round_trip(xla_run, tmp_path):
    import torch

    from drivetrain import Accelerator
    from drivetrain.utils import set_seed

    accelerator = Accelerator()
    model, loader = _model_and_data()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    set_seed(7)
    saved_params = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    saved_avg = optimizer.state_dict()["state"][0]["exp_avg"].cpu().clone()
    draw = torch.rand(3, device=accelerator.device).cpu()
    set_seed(7)
    accelerator.save_state(str(tmp_path / "ckpt"))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    x, y = next(iter(loader))
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
    torch.rand(5, device=accelerator.device).cpu()
    accelerator.load_state(str(tmp_path / "ckpt"))
    for key, value in model.state_dict().items():
        assert value.device.type == "xla"
        assert torch.equal(value.cpu(), saved_params[key]), key
    assert torch.equal(optimizer.state_dict()["state"][0]["exp_avg"].cpu(), saved_avg)
    assert torch.equal(torch.rand(3, device=accelerator.device).cpu(), draw)  # the XLA generator came back


def test_launch_tpu_runs_the_main_function_through_xmp_spawn(tmp_path):
    out = tmp_path / "result.json"
    env = {k: v for k, v in clean_environ(PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU")).items()
           if not k.startswith("XLA_")}
    result = subprocess.run(
        [sys.executable, "-m", "drivetrain", "launch", "--tpu", "--main_training_function", "train",
         "--mixed-precision", "bf16", "--downcast_bf16", str(SCRIPTS / "xla_spawn_train.py"), str(out)],
        env=env, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(out.read_text())
    assert seen["distributed_type"] == "XLA" and seen["device"].startswith("xla")
    assert seen["num_processes"] == 1 and seen["pjrt_processes"] == "1"  # xmp.spawn's replica
    assert seen["mixed_precision"] == "bf16" and seen["downcast"] == "1" and seen["use_bf16"] is None
    losses = seen["losses"]
    assert len(losses) == 12 and sum(losses[-4:]) < sum(losses[:4])
