"""Launched on 2 processes: DeepSpeed ZeRO at each given stage against the DDP run.

    check_deepspeed.py STAGES DIRECTORY        (STAGES: "2", or "1,2,3" for each in turn)

Trains the same small model with DDP (the launch's default strategy, once) and then with
DeepSpeed ZeRO at each stage, with and without CPU optimizer offload, and checks: the losses and weights match
DDP's, gradient accumulation is DeepSpeed's own and matches DDP's, ``save_state`` /
``load_state`` resume exactly (into a fresh engine and into the running one), that a
checkpoint of another model is refused with nothing changed, and the full
state dict loads into a plain model. Stage 3 also checks the 16-bit ``save_model``, fp32
master weights under bf16, ``zero3_init_context``, MoE leaf modules, and two models with two
``DeepSpeedPlugin``s (a ZeRO-2 student and a ZeRO-3 teacher). Every stage also checks that
``clip_grad_norm_`` returns the engine's real global norm of each step (``None`` before the
first), that ``clip_grad_value_`` is refused, and that a dynamo backend compiles through the
engine. Prints CHECK-DEEPSPEED-OK for each stage. The stages share one launch: starting the
processes and the DDP reference cost as much as a stage's checks.
"""

from __future__ import annotations

import os
import sys

import torch

from drivetrain import Accelerator, DeepSpeedPlugin, DistributedType, TorchDynamoPlugin, get_active_deepspeed_plugin
from drivetrain.errors import DrivetrainError
from drivetrain.state import AcceleratorState, GradientState

torch.set_num_threads(1)
FEATURES, HIDDEN, BATCH, STEPS = 6, 16, 8, 4  # BATCH per process


def fresh_accelerator(**kwargs) -> Accelerator:
    AcceleratorState._reset_state()
    GradientState._reset_state()
    return Accelerator(**kwargs)


class Experts(torch.nn.Module):
    """Stands for a mixture-of-experts layer (ZeRO-3 leaf module)."""

    def __init__(self, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.up = torch.nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.up(x))


class Net(torch.nn.Module):
    def __init__(self, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(FEATURES, hidden)
        self.experts = Experts(hidden)
        self.out = torch.nn.Linear(hidden, 1)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.experts(torch.tanh(self.inp(x)))) * self.scale * 2


def make(seed: int = 0, lr: float = 0.05):
    torch.manual_seed(seed)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return model, optimizer


def loader(world: int):
    data = torch.utils.data.TensorDataset(torch.randn(BATCH * world * 2, FEATURES), torch.randn(BATCH * world * 2, 1))
    return torch.utils.data.DataLoader(data, batch_size=BATCH)


def batch(step: int, rank: int, world: int):
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH * world, FEATURES, generator=generator)
    y = x.sum(dim=1, keepdim=True).sin()
    share = slice(rank * BATCH, (rank + 1) * BATCH)
    return x[share], y[share]


def train(accelerator, model, optimizer, scheduler=None, steps=STEPS, first=0, accumulate=False, dtype=None,
          norms=None):
    """Per-step losses of this process (``accumulate``: inside ``accelerator.accumulate``;
    ``norms``: a list that gets ``clip_grad_norm_``'s answer after each backward)."""
    world, rank = accelerator.num_processes, accelerator.process_index
    losses = []
    for step in range(first, first + steps):
        x, y = batch(step, rank, world)
        x = x if dtype is None else x.to(dtype)
        if accumulate:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                optimizer.zero_grad()
        else:
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
            accelerator.backward(loss)
            if norms is not None:  # DDP: the norm before the step; DeepSpeed: its step's (it stepped)
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), 100.0)))
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def full_weights(accelerator, model):
    state = accelerator.get_state_dict(model)
    return {k: v.clone() for k, v in state.items()}


def assert_weights_close(mine, theirs, **tolerance):
    assert set(mine) == set(theirs), (sorted(mine), sorted(theirs))
    for key in mine:
        torch.testing.assert_close(mine[key].float(), theirs[key].float(), msg=lambda m, k=key: f"{k}: {m}",
                                   **tolerance)


# ------------------------------------------------------------------ the DDP reference


def ddp_reference():
    accelerator = fresh_accelerator()
    assert accelerator.distributed_type == "MULTI_CPU", accelerator.distributed_type
    model, optimizer = accelerator.prepare(*make())
    norms = []
    losses = train(accelerator, model, optimizer, norms=norms)
    weights = full_weights(accelerator, model)
    accumulated = fresh_accelerator(gradient_accumulation_steps=2)
    model2, optimizer2 = accumulated.prepare(*make())
    losses2 = train(accumulated, model2, optimizer2, steps=2 * STEPS, accumulate=True)
    return losses, weights, losses2, full_weights(accumulated, model2), norms


# ------------------------------------------------------------------ DeepSpeed


def plugin(stage: int, offload: bool, **options) -> DeepSpeedPlugin:
    """Options for ``stage``; ZeRO-3 through a config dict with "auto" values, and no parameter
    kept whole (DeepSpeed keeps parameters under 100k elements whole by default: all of these)."""
    offload_device = "cpu" if offload else "none"
    if stage != 3:
        return DeepSpeedPlugin(zero_stage=stage, offload_optimizer_device=offload_device, **options)
    config = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
              "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                    "stage3_gather_16bit_weights_on_model_save": "auto"}}
    return DeepSpeedPlugin(hf_ds_config=config, zero_stage=3, offload_optimizer_device=offload_device, **options)


def check_matches_ddp(stage, offload, reference_losses, reference_weights, reference_norms):
    accelerator = fresh_accelerator(deepspeed_plugin=plugin(stage, offload, gradient_clipping=100.0))
    assert accelerator.distributed_type == DistributedType.DEEPSPEED
    assert get_active_deepspeed_plugin(accelerator.state) is accelerator.deepspeed_plugin
    assert accelerator.state.deepspeed_plugin.zero_stage == stage
    assert accelerator.scaler is None
    model, optimizer, data = accelerator.prepare(*make(), loader(accelerator.num_processes))
    assert type(model).__name__ == "DeepSpeedEngine", type(model)
    assert model.zero_optimization_stage() == stage
    assert model.zero_cpu_offload() == offload
    config = accelerator.state.deepspeed_plugin.deepspeed_config
    assert config["train_micro_batch_size_per_gpu"] == BATCH, config
    assert config["train_batch_size"] == BATCH * accelerator.num_processes, config
    assert accelerator.unwrap_model(model) is model.module
    assert accelerator.clip_grad_norm_(model.parameters(), 100.0) is None  # no step yet: no norm, not 0.0
    norms = []
    losses = train(accelerator, model, optimizer, norms=norms)
    torch.testing.assert_close(losses, reference_losses, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(norms, reference_norms, rtol=1e-4, atol=1e-6)  # the engine's real global norm
    try:
        accelerator.clip_grad_value_(model.parameters(), 0.01)
    except DrivetrainError as error:
        assert "clip_grad_norm_" in str(error), error
    else:
        raise AssertionError("clip_grad_value_ did nothing under DeepSpeed instead of refusing")
    weights = full_weights(accelerator, model)
    if accelerator.is_main_process:
        assert_weights_close(weights, reference_weights, rtol=1e-5, atol=1e-6)
    return accelerator, model


def check_compiled(stage, reference_losses):
    """A dynamo backend compiles through the engine, which stays the prepared model and trains alike."""
    accelerator = fresh_accelerator(deepspeed_plugin=plugin(stage, False, gradient_clipping=100.0),
                                    dynamo_plugin=TorchDynamoPlugin(backend="eager"))
    model, optimizer, _data = accelerator.prepare(*make(), loader(accelerator.num_processes))
    assert type(model).__name__ == "DeepSpeedEngine" and model.is_compiled, type(model)
    losses = train(accelerator, model, optimizer)
    torch.testing.assert_close(losses, reference_losses, rtol=1e-5, atol=1e-6)


def check_accumulation(stage, reference_losses, reference_weights):
    accelerator = fresh_accelerator(deepspeed_plugin=plugin(stage, False), gradient_accumulation_steps=2)
    model, optimizer = accelerator.prepare(*make(), loader(accelerator.num_processes))[:2]
    assert model.gradient_accumulation_steps() == 2 and accelerator.gradient_accumulation_steps == 2
    assert accelerator.state.deepspeed_plugin.deepspeed_config["train_batch_size"] == 2 * BATCH * 2
    losses = train(accelerator, model, optimizer, steps=2 * STEPS, accumulate=True)
    assert model.global_steps == STEPS, model.global_steps  # one optimizer step per window
    torch.testing.assert_close(losses, reference_losses, rtol=1e-5, atol=1e-6)
    weights = full_weights(accelerator, model)
    if accelerator.is_main_process:
        assert_weights_close(weights, reference_weights, rtol=1e-5, atol=1e-6)
    # the plugin's own accumulation wins over the Accelerator's (as in Accelerate)
    other = fresh_accelerator(deepspeed_plugin=plugin(stage, False, gradient_accumulation_steps=3))
    assert other.gradient_accumulation_steps == 3


def resumable(stage, offload, seed):
    accelerator = fresh_accelerator(deepspeed_plugin=plugin(stage, offload))
    model, optimizer = make(seed)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    model, optimizer, scheduler, _data = accelerator.prepare(model, optimizer, scheduler,
                                                             loader(accelerator.num_processes))
    return accelerator, model, optimizer, scheduler


def check_save_and_resume(stage, offload, directory):
    accelerator, model, optimizer, scheduler = resumable(stage, offload, seed=0)
    train(accelerator, model, optimizer, scheduler, steps=3)
    path = os.path.join(directory, f"zero{stage}-offload{int(offload)}")
    # Saved without blocking: training goes on while the engine's files are written.
    accelerator.save_state(path, blocking=False)
    continued = train(accelerator, model, optimizer, scheduler, steps=3, first=3)
    accelerator.wait_for_checkpoint()
    files = sorted(os.listdir(path))
    assert "manifest.json" in files and "deepspeed_model_0" in files, files
    assert not any(name.startswith("optimizer_") for name in files), files  # inside the engine's checkpoint
    lrs = scheduler.get_last_lr()
    end = full_weights(accelerator, model)

    # into a fresh engine built from other weights
    accelerator2, model2, optimizer2, scheduler2 = resumable(stage, offload, seed=7)
    accelerator2.load_state(path)
    assert scheduler2.get_last_lr() == [0.025], scheduler2.get_last_lr()
    resumed = train(accelerator2, model2, optimizer2, scheduler2, steps=3, first=3)
    assert resumed == continued, (resumed, continued)
    assert scheduler2.get_last_lr() == lrs
    again = full_weights(accelerator2, model2)
    if accelerator2.is_main_process:
        assert_weights_close(again, end, rtol=0, atol=0)

    # into the engine that saved it (back in time)
    accelerator2.load_state(path)
    assert train(accelerator2, model2, optimizer2, scheduler2, steps=3, first=3) == continued


def check_full_state_dict(accelerator, model):
    """Under ZeRO-3 the gathered state dict loads into a plain model with the same outputs."""
    state = accelerator.get_state_dict(model)
    x = torch.randn(5, FEATURES, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = model(x)  # collective under ZeRO-3: every process runs it
    if accelerator.is_main_process:
        plain = Net()
        plain.load_state_dict(state)
        with torch.no_grad():
            torch.testing.assert_close(plain(x), expected)
    else:
        assert state == {}


def check_save_16bit_model(stage, directory):
    accelerator = fresh_accelerator(mixed_precision="bf16",
                                    deepspeed_plugin=plugin(stage, False, zero3_save_16bit_model=True))
    assert accelerator.mixed_precision == "bf16"
    model, optimizer = accelerator.prepare(*make(), loader(accelerator.num_processes))[:2]
    assert accelerator.state.deepspeed_plugin.deepspeed_config["bf16"] == {"enabled": True}
    train(accelerator, model, optimizer, steps=2, dtype=torch.bfloat16)
    target = os.path.join(directory, "saved-16bit")
    accelerator.save_model(model, target)
    x = torch.randn(5, FEATURES, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        expected = model(x.to(torch.bfloat16))
    if accelerator.is_main_process:
        from safetensors.torch import load_file

        state = load_file(os.path.join(target, "model.safetensors"))
        assert state["inp.weight"].dtype == torch.bfloat16, state["inp.weight"].dtype
        plain = Net().to(torch.bfloat16)
        plain.load_state_dict(state)
        with torch.no_grad():
            torch.testing.assert_close(plain(x.to(torch.bfloat16)), expected)
    # without the flag: the fp32 master weights, close to the 16-bit ones
    accelerator.state.deepspeed_plugin.zero3_save_16bit_model = False
    masters = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        assert masters["inp.weight"].dtype == torch.float32
        torch.testing.assert_close(masters["inp.weight"].to(torch.bfloat16), state["inp.weight"])


def check_zero3_construction_and_leaves(stage):
    options = plugin(stage, False, zero3_init_flag=True, transformer_moe_cls_names="Experts")
    accelerator = fresh_accelerator(deepspeed_plugin=options)
    with accelerator.state.deepspeed_plugin.zero3_init_context():
        model, optimizer = make()
    assert all(hasattr(p, "ds_id") for p in model.parameters())  # born partitioned
    model, optimizer = accelerator.prepare(model, optimizer, loader(accelerator.num_processes))[:2]
    assert getattr(accelerator.unwrap_model(model).experts, "_z3_leaf", False)
    losses = train(accelerator, model, optimizer, steps=3)
    assert losses[-1] < losses[0] * 1.5, losses


def check_two_models(directory):
    """Knowledge distillation: a ZeRO-2 student trained, a ZeRO-3 teacher frozen."""
    plugins = {"student": DeepSpeedPlugin(zero_stage=2), "teacher": DeepSpeedPlugin(zero_stage=3)}
    accelerator = fresh_accelerator(deepspeed_plugins=plugins)
    state = accelerator.state
    assert get_active_deepspeed_plugin(state) is plugins["student"] and plugins["student"].selected
    student, optimizer = make(1)
    student, optimizer, data = accelerator.prepare(student, optimizer, loader(accelerator.num_processes))
    state.select_deepspeed_plugin("teacher")
    assert accelerator.deepspeed_plugin is plugins["teacher"] and not plugins["student"].selected
    teacher = accelerator.prepare(make(2)[0])
    assert teacher.zero_optimization_stage() == 3 and student.zero_optimization_stage() == 2
    teacher.eval()
    before = full_weights(accelerator, teacher)
    world, rank = accelerator.num_processes, accelerator.process_index
    losses = []
    x, _y = batch(0, rank, world)  # one batch, learnt step by step
    for _step in range(4):
        with torch.no_grad():
            target = teacher(x)
        loss = torch.nn.functional.mse_loss(student(x), target)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    after = full_weights(accelerator, teacher)
    if accelerator.is_main_process:
        assert_weights_close(after, before, rtol=0, atol=0)  # the teacher is never trained
    path = os.path.join(directory, "two-models")
    accelerator.save_state(path)
    accelerator.wait_for_everyone()  # the checkpoint is in place once its commit ends
    files = sorted(os.listdir(path))
    assert "deepspeed_model_0" in files and "model_1" in files, files
    accelerator.load_state(path)
    reloaded = full_weights(accelerator, teacher)
    if accelerator.is_main_process:
        assert_weights_close(reloaded, before, rtol=0, atol=0)


def check_failed_load_changes_nothing(stage, directory):
    """A checkpoint of another hidden size, or of other optimizer parameter groups, is refused
    before DeepSpeed copies anything: every parameter, the step count and the schedule stay."""
    from drivetrain.errors import CheckpointError

    path = os.path.join(directory, f"zero{stage}-offload0")  # written by check_save_and_resume (hidden 16)
    accelerator = fresh_accelerator(deepspeed_plugin=plugin(stage, False))
    torch.manual_seed(3)
    wider = Net(hidden=HIDDEN + 8)
    optimizer = torch.optim.SGD(wider.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    model, optimizer, scheduler, _data = accelerator.prepare(wider, optimizer, scheduler,
                                                             loader(accelerator.num_processes))
    train(accelerator, model, optimizer, scheduler, steps=1)
    before, steps, lrs = full_weights(accelerator, model), model.global_steps, scheduler.get_last_lr()
    try:
        accelerator.load_state(path)
        raise AssertionError("a checkpoint of another hidden size was loaded")
    except CheckpointError as error:
        assert "inp.weight" in str(error) and f"({HIDDEN}, {FEATURES})" in str(error), error
    after = full_weights(accelerator, model)
    if accelerator.is_main_process:
        assert_weights_close(after, before, rtol=0, atol=0)
    assert model.global_steps == steps and scheduler.get_last_lr() == lrs

    # the same model with its optimizer split into two parameter groups: ZeRO's flat partitions differ
    accelerator = fresh_accelerator(deepspeed_plugin=plugin(stage, False))
    torch.manual_seed(3)
    same = Net()
    groups = [{"params": list(same.inp.parameters())},
              {"params": list(same.experts.parameters()) + list(same.out.parameters())}]
    optimizer = torch.optim.SGD(groups, lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    model, optimizer, scheduler, _data = accelerator.prepare(same, optimizer, scheduler,
                                                             loader(accelerator.num_processes))
    before = full_weights(accelerator, model)
    if stage > 0:
        try:
            accelerator.load_state(path)
            raise AssertionError("optimizer states of other parameter groups were loaded")
        except CheckpointError as error:
            assert "optimizer state does not fit" in str(error), error
        after = full_weights(accelerator, model)
        if accelerator.is_main_process:
            assert_weights_close(after, before, rtol=0, atol=0)
    accelerator.wait_for_everyone()


def check_engine_files_never_run_code(stage, directory):
    """A pickle that would run code, put in place of an engine file with its manifest fixed up, is refused."""
    import json

    from drivetrain.checkpointing.checksums import file_digest
    from drivetrain.errors import CheckpointError

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    accelerator, model, optimizer, scheduler = resumable(stage, False, seed=0)
    train(accelerator, model, optimizer, scheduler, steps=1)
    path = os.path.join(directory, f"evil-zero{stage}")
    accelerator.save_state(path, exclude_frozen_parameters=True)  # save_state's kwargs reach save_checkpoint
    accelerator.wait_for_everyone()
    marker = os.path.join(directory, f"pwned-{stage}")
    state = os.path.join(path, "deepspeed_model_0", "state")
    if accelerator.is_main_process:  # every process's model file (ZeRO-3 has one per process)
        manifest_path = os.path.join(path, "manifest.json")
        manifest = json.load(open(manifest_path))
        for name in sorted(n for n in os.listdir(state) if n.endswith("model_states.pt")):
            torch.save({"module": {}, "evil": Exploit()}, os.path.join(state, name))
            relative = f"deepspeed_model_0/state/{name}"
            manifest["sizes"][relative] = os.path.getsize(os.path.join(state, name))
            manifest["checksums"][relative] = file_digest(os.path.join(state, name))
        json.dump(manifest, open(manifest_path, "w"))
    accelerator.wait_for_everyone()
    try:
        accelerator.load_state(path)
        raise AssertionError("an engine file that runs code was loaded")
    except CheckpointError as error:
        assert "cannot be read safely" in str(error), error
    assert not os.path.exists(marker), "the pickle ran code"
    accelerator.wait_for_everyone()


def check_stage(stage: int, directory: str, reference) -> None:
    reference_losses, reference_weights, accumulated_losses, accumulated_weights, norms = reference
    check_compiled(stage, reference_losses)
    for offload in (False, True):
        accelerator, model = check_matches_ddp(stage, offload, reference_losses, reference_weights, norms)
        if stage == 3 and not offload:
            check_full_state_dict(accelerator, model)
        check_save_and_resume(stage, offload, directory)
    check_accumulation(stage, accumulated_losses, accumulated_weights)
    check_failed_load_changes_nothing(stage, directory)
    check_engine_files_never_run_code(stage, directory)
    if stage == 3:
        check_save_16bit_model(stage, directory)
        check_zero3_construction_and_leaves(stage)
        check_two_models(directory)


def main() -> None:
    stages, directory = [int(stage) for stage in sys.argv[1].split(",")], sys.argv[2]
    reference = ddp_reference()
    for stage in stages:
        check_stage(stage, directory, reference)
        accelerator = fresh_accelerator()
        accelerator.wait_for_everyone()
        print(f"CHECK-DEEPSPEED-OK stage {stage} rank {accelerator.process_index}", flush=True)


if __name__ == "__main__":
    main()
