"""MonitorKwargs: off by default (nothing wrapped, nothing logged), the FLOP count and MFU
against a hand count, the options checked, the stop on a spike with its checkpoint, and, in
one launch on two processes, the metrics in TensorBoard read back with TensorBoard's own
reader, samples/s and tokens/s against the script's own count, and a spike skipped on every
process."""

from __future__ import annotations

import glob
import json
import math

import pytest
import torch

from drivetrain import Accelerator, MonitorKwargs, ProjectConfiguration
from drivetrain.errors import ConfigError, LossSpikeError
from drivetrain.tracking import GeneralTracker
from launching import assert_ok, launch

pytestmark = pytest.mark.usefixtures("fresh_state")

IN, HIDDEN, OUT, BATCH = 12, 24, 6, 8


class Recorder(GeneralTracker):
    """Keeps what is logged."""

    name = "recorder"
    requires_logging_directory = False

    def __init__(self):
        super().__init__()
        self.logged: list[tuple[dict, int | None]] = []

    @property
    def tracker(self):
        return self

    def log(self, values, step=None, **kwargs):
        self.logged.append((dict(values), step))


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT))


def loader(batches: int, with_tokens: bool = False) -> torch.utils.data.DataLoader:
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(batches * BATCH, IN, generator=generator), torch.randn(batches * BATCH, OUT, generator=generator)
    if not with_tokens:
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH)
    mask = (torch.arange(10).expand(batches * BATCH, 10) < torch.randint(1, 11, (batches * BATCH, 1),
                                                                         generator=generator)).long()
    rows = [{"x": x[i], "y": y[i], "input_ids": torch.zeros(10, dtype=torch.long), "attention_mask": mask[i]}
            for i in range(len(x))]
    return torch.utils.data.DataLoader(rows, batch_size=BATCH)


def train(accelerator, model, optimizer, data, spike_at: int | None = None, before: list | None = None) -> list[dict]:
    """Plain training steps; the parameters before each step are kept in ``before``."""
    before = [] if before is None else before
    for index, batch in enumerate(data):
        x, y = (batch["x"], batch["y"]) if isinstance(batch, dict) else batch
        loss = torch.nn.functional.mse_loss(model(x), y)
        if index == spike_at:
            loss = loss * 1e4
        before.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    return before


def test_offered_where_accelerate_offers_its_kwargs_handlers():
    import drivetrain.utils
    import drivetrain.utils.dataclasses

    assert drivetrain.utils.MonitorKwargs is drivetrain.utils.dataclasses.MonitorKwargs is MonitorKwargs
    assert MonitorKwargs().to_kwargs() == {} and MonitorKwargs(log_every=5).to_kwargs() == {"log_every": 5}


def test_off_by_default_nothing_is_wrapped_or_logged():
    recorder = Recorder()
    accelerator = Accelerator(log_with=[recorder])
    accelerator.init_trackers("off")
    model, optimizer, data = accelerator.prepare(mlp(), torch.optim.SGD(mlp().parameters(), lr=0.1), loader(6))
    assert accelerator._monitor is None
    assert "step" not in vars(optimizer) and data.batch_observer is None
    assert not model._forward_pre_hooks
    train(accelerator, model, optimizer, data)
    accelerator.end_training()
    assert recorder.logged == []


def test_flops_and_mfu_agree_with_a_hand_count():
    peak = 1e12
    recorder = Recorder()
    accelerator = Accelerator(log_with=[recorder],
                              kwargs_handlers=[MonitorKwargs(log_every=3, peak_flops=peak, on_spike=None)])
    accelerator.init_trackers("flops")
    model = mlp()
    model, optimizer, data = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01),
                                                 loader(7, with_tokens=True))
    assert "step" in vars(optimizer) and data.batch_observer is not None
    train(accelerator, model, optimizer, data)
    accelerator.end_training()
    # By hand: 2*in*out per Linear and sample forward; backward twice that (the gradient of the
    # weight and of the input), except the first Linear's input gradient, which nothing needs.
    forward = 2 * BATCH * (IN * HIDDEN + HIDDEN * OUT)
    hand = forward + 2 * forward - 2 * BATCH * IN * HIDDEN
    steps = [step for _, step in recorder.logged]
    assert steps == [4, 7], recorder.logged  # the first step counts FLOPs and stays out of the windows
    for values, _ in recorder.logged:
        assert values["perf/model_flops_per_step"] == hand
        assert values["perf/model_flops_per_s"] == pytest.approx(hand / values["perf/step_time_s"])
        assert values["perf/mfu"] == pytest.approx(hand / values["perf/step_time_s"] / peak)
        parts = sum(values[f"perf/{name}"] for name in ("data_wait_s", "forward_backward_s", "optimizer_s",
                                                        "collectives_s"))
        assert parts == pytest.approx(values["perf/step_time_s"])
        assert values["memory/peak_bytes"] > 0 and values["perf/samples_per_s"] > 0
    # the tokens are the ones attention_mask marks, per second of the windows
    tokens = sum(int(b["attention_mask"].sum()) for b in list(data)[1:])
    wall = sum(v["perf/step_time_s"] * 3 for v, _ in recorder.logged)
    rate = sum(v["perf/tokens_per_s"] * v["perf/step_time_s"] * 3 for v, _ in recorder.logged) / wall
    assert rate == pytest.approx(tokens / wall, rel=1e-6)


def test_no_mfu_on_a_platform_without_a_known_peak():
    recorder = Recorder()
    accelerator = Accelerator(log_with=[recorder], kwargs_handlers=[MonitorKwargs(log_every=2, on_spike=None)])
    accelerator.init_trackers("nomfu")
    model, optimizer, data = accelerator.prepare(mlp(), torch.optim.SGD(mlp().parameters(), lr=0.1), loader(3))
    train(accelerator, model, optimizer, data)
    accelerator.end_training()
    (values, _), = recorder.logged
    if accelerator.run.platform.peak_flops(accelerator.mixed_precision) is None:
        assert "perf/mfu" not in values and "perf/model_flops_per_step" in values


def test_the_figures_reach_the_progress_bar():
    from drivetrain.utils import tqdm

    accelerator = Accelerator(kwargs_handlers=[MonitorKwargs(log_every=2, peak_flops=1e12)])
    model, optimizer, data = accelerator.prepare(mlp(), torch.optim.SGD(mlp().parameters(), lr=0.1), loader(5))
    bar = tqdm(data, disable=False)
    train(accelerator, model, optimizer, bar)
    assert {"step", "samples/s", "MFU"} <= set(bar.postfix.replace("=", ", ").split(", ")), bar.postfix
    bar.close()
    accelerator.end_training()


@pytest.mark.parametrize("options, message", [
    ({"log_every": 0}, "MonitorKwargs(log_every=0) must be a whole number of steps"),
    ({"peak_flops": -1}, "MonitorKwargs(peak_flops=-1) must be the device's peak FLOP/s"),
    ({"on_spike": "panic"}, "MonitorKwargs(on_spike='panic') is not an action; use one of 'warn', 'skip', 'stop'"),
    ({"spike_factor": 1}, "MonitorKwargs(spike_factor=1) must be a number above 1"),
    ({"spike_window": 1}, "MonitorKwargs(spike_window=1) must be a whole number of losses"),
])
def test_bad_options_are_one_line(options, message):
    with pytest.raises(ConfigError) as caught:
        MonitorKwargs(**options)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_stop_needs_a_place_for_its_checkpoint():
    with pytest.raises(ConfigError, match="checkpoint_dir"):
        Accelerator(kwargs_handlers=[MonitorKwargs(on_spike="stop")])


def test_a_spike_under_stop_saves_the_last_good_state_and_raises(tmp_path):
    accelerator = Accelerator(project_config=ProjectConfiguration(project_dir=str(tmp_path),
                                                                  automatic_checkpoint_naming=True),
                              kwargs_handlers=[MonitorKwargs(on_spike="stop", spike_window=6)])
    model = mlp()
    model, optimizer, data = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), loader(12))
    before: list[dict] = []
    with pytest.raises(LossSpikeError) as caught:
        train(accelerator, model, optimizer, data, spike_at=8, before=before)
    assert "loss spike at step 9 (batch 8 of epoch 0)" in str(caught.value)
    assert caught.value.checkpoint in str(caught.value)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    assert len(before) == 9 and all(torch.equal(before[8][k], v) for k, v in saved.items())  # the bad step not applied
    for parameter in model.parameters():
        parameter.data.add_(1.0)
    accelerator.load_state(caught.value.checkpoint)
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())


def test_a_non_finite_loss_is_a_spike_from_the_first_step(caplog):
    accelerator = Accelerator(kwargs_handlers=[MonitorKwargs(on_spike="skip")])
    model = mlp()
    model, optimizer, data = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), loader(3))
    first = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = next(iter(data))
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y) * math.nan)
    optimizer.step()
    assert accelerator.optimizer_step_was_skipped
    assert all(torch.equal(first[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert "loss spike at step 1 (batch 0 of epoch 0): loss nan is not finite" in caplog.text


def test_known_gpu_peaks():
    from drivetrain_cuda.peak_flops import peak_flops

    assert peak_flops("NVIDIA H100 PCIe", "bf16") == 756e12
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16") == 989.4e12
    assert peak_flops("NVIDIA A100-SXM4-80GB", "fp16") == 312e12
    assert peak_flops("NVIDIA A10G", "bf16") is None and peak_flops("NVIDIA T4", "bf16") is None


def test_two_processes_log_to_tensorboard_and_skip_a_spike_together(tmp_path):
    """One launch checks everything on two processes (see tests/scripts/check_monitoring.py)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = launch("check_monitoring.py", str(tmp_path), timeout=300)
    assert_ok(result)
    counted = json.loads([line for line in result.stdout.splitlines() if line.startswith("{")][-1])
    # the spike on process 1 was reported there, and skipped on both
    assert "loss spike at step 12 (batch 11 of epoch 0)" in result.stderr, result.stderr
    assert "step 12: another process saw a loss spike; the optimizer step is skipped" in result.stderr
    assert "step monitor: 41 optimizer steps" in result.stderr
    (events,) = glob.glob(str(tmp_path / "**" / "events.out.tfevents*"), recursive=True)
    reader = EventAccumulator(events)
    reader.Reload()
    tags = set(reader.Tags()["scalars"])
    assert {"perf/step_time_s", "perf/data_wait_s", "perf/forward_backward_s", "perf/optimizer_s",
            "perf/collectives_s", "perf/samples_per_s", "perf/tokens_per_s", "perf/model_flops_per_step",
            "memory/peak_bytes", "loss/spikes"} <= tags, tags
    assert "perf/mfu" not in tags  # the CPU has no known peak and none was given
    step_times = {e.step: e.value for e in reader.Scalars("perf/step_time_s")}
    assert sorted(step_times) == [11, 21, 31, 41]
    walls = {step: step_times[step] * 10 for step in step_times}  # ten steps per window
    for name, outside in (("samples", counted["samples"]), ("tokens", counted["tokens"])):
        rates = {e.step: e.value for e in reader.Scalars(f"perf/{name}_per_s")}
        logged = sum(rates[step] * walls[step] for step in walls)
        assert logged == pytest.approx(outside, rel=0.01), name  # the count itself
        assert logged / sum(walls.values()) == pytest.approx(outside / counted["wall"], rel=0.10), name
    assert [e.value for e in reader.Scalars("loss/spikes")] == [0, 1, 1, 1]
