"""The training step adds no device synchronisation to what plain PyTorch does.

A host-device sync is what makes a GPU step slower than plain PyTorch: the CPU waits instead
of queueing the next step. Every such sync of a tensor's value goes through the aten op
``_local_scalar_dense`` (``.item()``, ``bool(t)``, ``int(t)``, ``float(t)``), which a
dispatch mode counts on any device, so a CPU run proves what a GPU run would do.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from drivetrain import Accelerator, GradScalerKwargs

pytestmark = pytest.mark.usefixtures("fresh_state")

SYNCING_OPS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::equal"}


class SyncCounter(TorchDispatchMode):
    """Counts the ops that need a tensor's value on the host."""

    def __init__(self) -> None:
        super().__init__()
        self.syncs: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name in SYNCING_OPS:
            self.syncs.append(func._schema.name)
        return func(*args, **(kwargs or {}))


def _make(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _batches(device: torch.device, count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 8, generator=generator).to(device), torch.randn(4, 4, generator=generator).to(device))
            for _ in range(count)]


def _plain_fp16_syncs(device: torch.device, steps: int) -> int:
    """Syncs of the same loop written with torch alone (GradScaler checks for inf once a step)."""
    model, optimizer = _make()
    model.to(device)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.9)
    scaler = torch.amp.GradScaler(device.type, init_scale=1024)
    batches = _batches(device, steps)
    with SyncCounter() as counter:
        for x, y in batches:
            with torch.autocast(device.type, dtype=torch.float16):
                out = model(x)
            loss = torch.nn.functional.mse_loss(out.float(), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad()
    return len(counter.syncs)


def _count_get_scale(monkeypatch) -> list[int]:
    calls = [0]
    original = torch.amp.GradScaler.get_scale

    def counted(self):
        calls[0] += 1
        return original(self)

    monkeypatch.setattr(torch.amp.GradScaler, "get_scale", counted)
    return calls


@pytest.mark.parametrize("accumulation", [1, 2])
def test_fp16_step_syncs_no_more_than_plain_torch(monkeypatch, accumulation):
    steps = 6
    accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=accumulation,
                              kwargs_handlers=[GradScalerKwargs(init_scale=1024)])
    model, optimizer = _make()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.9)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    batches = _batches(accelerator.device, steps)
    get_scale = _count_get_scale(monkeypatch)
    with SyncCounter() as counter:
        for x, y in batches:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            accelerator.gather(loss.detach())
    assert get_scale[0] == 0
    optimizer_steps = steps // accumulation
    # torch's own GradScaler.step reads its inf flag once per real step; nothing else may sync
    assert len(counter.syncs) == optimizer_steps, counter.syncs
    assert len(counter.syncs) <= _plain_fp16_syncs(accelerator.device, steps)
    assert not optimizer.step_was_skipped
    assert scheduler.scheduler.last_epoch == optimizer_steps


@pytest.mark.parametrize("precision", ["no", "bf16"])
def test_step_without_scaler_never_syncs(precision):
    accelerator = Accelerator(mixed_precision=precision)
    model, optimizer = accelerator.prepare(*_make())
    batches = _batches(accelerator.device, 4)
    with SyncCounter() as counter:
        for x, y in batches:
            with accelerator.accumulate(model):
                with accelerator.autocast():
                    loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
    assert counter.syncs == []
    assert not accelerator.optimizer_step_was_skipped


def test_skipped_step_is_known_without_get_scale(monkeypatch):
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=2.0**100)])
    model, optimizer = accelerator.prepare(*_make())
    get_scale = _count_get_scale(monkeypatch)
    x = torch.randn(4, 8).to(accelerator.device)
    before = [p.detach().clone() for p in model.parameters()]
    accelerator.backward(model(x).sum() * 1e4)  # overflows at this scale
    optimizer.step()
    assert optimizer.step_was_skipped
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    # the scale came down to a finite value; a later step runs
    for _ in range(120):
        optimizer.zero_grad()
        accelerator.backward(model(x).sum())
        optimizer.step()
        if not optimizer.step_was_skipped:
            break
    assert not optimizer.step_was_skipped
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert get_scale[0] == 0


def test_skipped_step_with_an_optimizer_that_checks_inf_itself(monkeypatch):
    """Fused/capturable optimizers get the scaler's inf flag; it is read only when asked."""
    model, _ = _make()
    try:
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01, fused=True)
    except (RuntimeError, ValueError) as error:  # pragma: no cover - depends on the build
        pytest.skip(f"fused Adam unavailable here: {error}")
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=2.0**100)])
    model, optimizer = accelerator.prepare(model, optimizer)
    if not getattr(optimizer.optimizer, "_step_supports_amp_scaling", False):
        pytest.skip("this torch build's fused Adam does not take the scaler's inf flag")
    x = torch.randn(4, 8).to(accelerator.device)
    before = [p.detach().clone() for p in model.parameters()]
    accelerator.backward(model(x).sum() * 1e4)
    with SyncCounter() as counter:
        optimizer.step()
    assert counter.syncs == []
    assert optimizer.step_was_skipped
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_optimizer_survives_a_pickle_round_trip_with_its_skip_watch():
    import pickle

    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=2.0**100)])
    model, optimizer = accelerator.prepare(*_make())
    accelerator.backward(model(torch.randn(4, 8).to(accelerator.device)).sum() * 1e4)
    optimizer.step()
    copy = pickle.loads(pickle.dumps(optimizer))
    assert copy.step_was_skipped
    assert copy._step_hook is not None


def test_a_bf16_step_calls_no_plugin_in_backward():
    # loss scaling belongs to fp16 alone (the native fp16 precision's role object): a bf16
    # backward is torch's own, through the run's role objects, with no hook call on the step
    from drivetrain.plugin_api import Precision, Strategy

    accelerator = Accelerator(mixed_precision="bf16")
    run = accelerator.run
    assert type(run.strategy) is Strategy and type(run.precision).backward is Precision.backward
    model, optimizer = accelerator.prepare(*_make())
    x, y = _batches(accelerator.device, 1)[0]
    output = model(x)
    assert output.dtype == torch.float32  # autocast's output, converted back
    accelerator.backward(torch.nn.functional.mse_loss(output, y))
    assert all(p.grad is not None for p in model.parameters())


def test_an_fp16_run_scales_its_loss_through_the_precision_role():
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=4.0)])
    run = accelerator.run
    assert run.precision.name == "fp16" and run.grad_scaler is accelerator.scaler is not None
    weight = torch.ones(3, requires_grad=True)
    accelerator.backward((weight * 2).sum())  # the strategy (none chosen) hands it to the precision
    assert torch.equal(weight.grad, torch.full((3,), 2.0 * 4.0))  # scaled by the run's scaler
