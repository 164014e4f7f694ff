"""The Accelerator in one process: arguments, the step, wrong use, helpers."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from drivetrain import (
    Accelerator,
    AutocastKwargs,
    GradScalerKwargs,
    ProfileKwargs,
    TorchDynamoPlugin,
    get_logger,
    release_memory,
)
from drivetrain.errors import ConfigError, DrivetrainError, PluginSelectionError

pytestmark = pytest.mark.usefixtures("fresh_state")


def make(seed=0, features=4):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(features, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_defaults_on_one_process():
    accelerator = Accelerator()
    assert (accelerator.num_processes, accelerator.process_index, accelerator.is_main_process) == (1, 0, True)
    # the detected platform's first device: the CPU, or the one GPU of a GPU machine
    assert accelerator.device.type == accelerator.run.selection.platform.name and accelerator.distributed_type == "NO"
    assert accelerator.mixed_precision == "no" and accelerator.gradient_accumulation_steps == 1
    assert not accelerator.use_distributed and accelerator.is_last_process


def test_prepare_keeps_order_and_types():
    model, optimizer = make()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    accelerator = Accelerator()
    s, o, m = accelerator.prepare(scheduler, optimizer, model)
    assert type(s).__name__ == "AcceleratedScheduler" and type(o).__name__ == "AcceleratedOptimizer"
    assert m is model and o.optimizer is optimizer and s.scheduler is scheduler
    assert accelerator.prepare(42) == 42  # unknown objects pass through


def test_prepared_objects_are_flagged_and_a_model_is_prepared_once():
    model, optimizer = make()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    loader = torch.utils.data.DataLoader(torch.arange(4.0), batch_size=2)
    other = [1, 2]
    accelerator = Accelerator()
    prepared = accelerator.prepare(model, optimizer, scheduler, loader, other)
    assert [getattr(obj, "_is_accelerate_prepared", False) for obj in prepared] == [True, True, True, True, False]
    again = accelerator.prepare_model(prepared[0])
    assert again is prepared[0] and len(accelerator._models) == 1


def test_unknown_mixed_precision_names_the_installed_ones():
    with pytest.raises(PluginSelectionError, match="unknown mixed precision 'fp7'.*bf16.*fp16"):
        Accelerator(mixed_precision="fp7")


def test_optimizer_over_a_standalone_parameter_and_backward_without_a_model_train_like_torch():
    """As in Accelerate: no prepared model is needed for prepare(optimizer) or backward()."""
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(4, 1))
    reference = weight.detach().clone().requires_grad_(True)
    initial = weight.detach().clone()
    accelerator = Accelerator(gradient_accumulation_steps=2)
    optimizer = accelerator.prepare(torch.optim.SGD([weight], lr=0.1))
    assert type(optimizer).__name__ == "AcceleratedOptimizer"
    plain = torch.optim.SGD([reference], lr=0.1)
    batches = [torch.randn(3, 4, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    for x in batches:
        with accelerator.accumulate():
            accelerator.backward((x @ weight).pow(2).mean())
            optimizer.step()
            optimizer.zero_grad()
    for first, second in (batches[:2], batches[2:]):
        ((first @ reference).pow(2).mean() / 2 + (second @ reference).pow(2).mean() / 2).backward()
        plain.step()
        plain.zero_grad()
    torch.testing.assert_close(weight.detach(), reference.detach())
    assert not torch.equal(weight.detach(), initial)  # it trained


def test_backend_option_attributes_read_none_and_typos_raise():
    accelerator = Accelerator()
    assert accelerator.fsdp_plugin is None and accelerator.deepspeed_plugin is None  # declared by strategies
    assert accelerator.megatron_lm_plugin is None and accelerator.torch_tp_plugin is None  # installed or not
    for typo in ("fsdp_plugn", "fdsp_plugin", "deepspeed_plugins_plugin", "not_a_plugin"):
        with pytest.raises(AttributeError, match=typo):
            getattr(accelerator, typo)


def test_unknown_keyword_argument():
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        Accelerator(not_an_option=1)
    assert Accelerator(some_strategy_plugin=None).num_processes == 1  # Accelerate scripts pass None


def test_duplicate_kwargs_handlers_are_refused():
    with pytest.raises(ConfigError, match="two AutocastKwargs"):
        Accelerator(kwargs_handlers=[AutocastKwargs(), AutocastKwargs()])


def test_gradient_accumulation_matches_the_big_batch():
    accelerator = Accelerator(gradient_accumulation_steps=4)
    x, y = torch.randn(16, 4).to(accelerator.device), torch.randn(16, 1).to(accelerator.device)
    reference, ref_opt = make()
    reference.to(accelerator.device)
    ref_opt.zero_grad()
    torch.nn.functional.mse_loss(reference(x), y).backward()
    ref_opt.step()

    model, optimizer = make()
    model, optimizer = accelerator.prepare(model, optimizer)
    syncs = []
    for chunk_x, chunk_y in zip(x.chunk(4), y.chunk(4)):
        with accelerator.accumulate(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(chunk_x), chunk_y))
            optimizer.step()
            optimizer.zero_grad()
            syncs.append(accelerator.sync_gradients)
    assert syncs == [False, False, False, True]
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b)


def test_scheduler_waits_for_the_accumulation_window():
    model, optimizer = make()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    rates = []
    for _ in range(4):
        with accelerator.accumulate(model):
            accelerator.backward(model(torch.randn(2, 4).to(accelerator.device)).sum())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        rates.append(scheduler.get_last_lr()[0])
    assert rates == [0.1, 0.05, 0.05, 0.025]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_close_to_fp32(precision):
    accelerator = Accelerator(mixed_precision=precision)
    x, y = torch.randn(32, 4).to(accelerator.device), torch.randn(32, 1).to(accelerator.device)
    reference, ref_opt = make()
    reference.to(accelerator.device)
    for _ in range(5):
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
    model, optimizer = make()
    assert accelerator.mixed_precision == precision
    model, optimizer = accelerator.prepare(model, optimizer)
    for _ in range(5):
        out = model(x)
        assert out.dtype == torch.float32  # outputs come back in fp32
        accelerator.backward(torch.nn.functional.mse_loss(out, y))
        optimizer.step()
        optimizer.zero_grad()
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, atol=3e-2, rtol=3e-2)
    inner = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    assert "_original_forward" not in inner.__dict__


def test_autocast_context_uses_the_run_precision():
    accelerator = Accelerator(mixed_precision="bf16")
    a, b = torch.randn(4, 4).to(accelerator.device), torch.randn(4, 4).to(accelerator.device)
    with accelerator.autocast():
        assert (a @ b).dtype == torch.bfloat16
    with accelerator.autocast(AutocastKwargs(enabled=False)):
        assert (a @ b).dtype == torch.float32


def test_fp16_overflow_skips_the_step_and_the_scheduler():
    model, optimizer = make()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=2.0**100)])
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    before = [p.detach().clone() for p in model.parameters()]
    accelerator.backward(model(torch.randn(4, 4).to(accelerator.device)).sum() * 1e4)
    optimizer.step()
    scheduler.step()
    assert optimizer.step_was_skipped and accelerator.optimizer_step_was_skipped
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert scheduler.get_last_lr() == [0.1]


def test_clip_grad_value_is_asked_of_the_strategy_first(monkeypatch):
    accelerator = Accelerator()
    model, optimizer = accelerator.prepare(*make())
    accelerator.backward(model(torch.randn(4, 4).to(accelerator.device)).sum())
    before = [p.grad.clone() for p in model.parameters()]
    asked = []

    def refuse(parameters, clip_value):
        asked.append(("clip_grad_value", clip_value))
        raise DrivetrainError("cannot clip by value; use clip_grad_norm_")

    monkeypatch.setattr(accelerator.run.strategy, "clip_grad_value", refuse)
    with pytest.raises(DrivetrainError, match="clip_grad_norm_"):
        accelerator.clip_grad_value_(model.parameters(), 1e-4)
    assert asked == [("clip_grad_value", 1e-4)]
    assert all(torch.equal(a, p.grad) for a, p in zip(before, model.parameters()))  # refused before clipping


def test_clip_grad_norm_and_value():
    model, optimizer = make()
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024)])
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(model(torch.randn(4, 4).to(accelerator.device)).sum() * 10)
    norm = accelerator.clip_grad_norm_(model.parameters(), 0.5)
    assert norm > 0.5  # the norm before clipping, unscaled
    total = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert total <= 0.5 + 1e-3
    accelerator.clip_grad_value_(model.parameters(), 0.01)
    assert all(p.grad.abs().max() <= 0.01 for p in model.parameters())


def test_triggers_and_process_helpers(capsys):
    accelerator = Accelerator()
    assert not accelerator.check_trigger()
    accelerator.set_trigger()
    assert accelerator.check_trigger() and not accelerator.check_trigger()
    ran = []
    accelerator.on_main_process(lambda: ran.append("main"))()
    accelerator.on_process(lambda: ran.append("p1"), process_index=1)()
    assert ran == ["main"]
    with accelerator.main_process_first():
        accelerator.print("hello")
    assert capsys.readouterr().out == "hello\n"
    with accelerator.split_between_processes([1, 2, 3]) as share:
        assert share == [1, 2, 3]


def test_save_and_register_for_checkpointing(tmp_path):
    accelerator = Accelerator()
    accelerator.save({"a": torch.ones(2)}, tmp_path / "x.pt")
    assert torch.equal(torch.load(tmp_path / "x.pt")["a"], torch.ones(2))
    accelerator.save({"a": torch.ones(2)}, tmp_path / "x.safetensors", safe_serialization=True)
    with pytest.raises(ConfigError, match="state_dict"):
        accelerator.register_for_checkpointing(object())
    # each refused object is named by its position, the ones that qualify are not
    with pytest.raises(ConfigError) as refused:
        accelerator.register_for_checkpointing(torch.nn.Linear(1, 1), torch.ones(1), 3)
    assert "Item at index 1 (Tensor), Item at index 2 (int)" in str(refused.value)
    assert "index 0" not in str(refused.value) and "define both" in str(refused.value)


def test_profile_writes_a_trace(tmp_path):
    accelerator = Accelerator()
    with accelerator.profile(ProfileKwargs(output_trace_dir=str(tmp_path), record_shapes=True)) as profiler:
        torch.randn(64, 64) @ torch.randn(64, 64)
    trace = json.loads((tmp_path / "profile_0.json").read_text())
    assert any("mm" in event.get("name", "") for event in trace["traceEvents"])
    assert profiler.key_averages()


def test_dynamo_backend_compiles_the_prepared_model():
    model, optimizer = make()
    accelerator = Accelerator(dynamo_plugin=TorchDynamoPlugin(backend="eager"))
    prepared, optimizer = accelerator.prepare(model, optimizer)
    assert hasattr(prepared, "_orig_mod") and prepared._orig_mod is model
    x = torch.randn(3, 4).to(accelerator.device)
    torch.testing.assert_close(prepared(x), model(x))
    assert accelerator.unwrap_model(prepared, keep_torch_compile=False) is model


def test_a_strategy_preparing_objects_together_still_gets_every_model_transform(monkeypatch):
    """Conversions before and finalisation (here: compilation) after, whoever wraps the model."""
    import types

    accelerator = Accelerator(cpu=True, dynamo_plugin=TorchDynamoPlugin(backend="eager"))
    run, calls = accelerator.run, []
    real_hook, real_call, real_convert = run.hook, run.call, run.precision.convert_model

    class Engine(torch.nn.Module):  # stands for an engine built from model and optimizer
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, x):
            return self.module(x)

    def hook(name):
        if name == "drivetrain_prepare_objects":
            return types.SimpleNamespace(get_hookimpls=lambda: ["a strategy"])
        return real_hook(name)

    def call(name, **kwargs):
        if name == "drivetrain_prepare_objects" and len(kwargs["objects"]) == 1:
            return list(kwargs["objects"])  # already prepared: the strategy hands it back
        if name == "drivetrain_prepare_objects":
            model, optimizer = kwargs["objects"]
            calls.append(("prepare_objects", getattr(model, "converted", False)))
            return [Engine(model), optimizer]
        if name in ("drivetrain_transform_objects", "drivetrain_finalize_model"):
            value = kwargs.get("objects", kwargs.get("model"))
            calls.append((name, type(value).__name__))
        return real_call(name, **kwargs)

    def convert(model):
        calls.append(("convert_model", type(model).__name__))
        model.converted = True
        return real_convert(model)

    monkeypatch.setattr(run, "hook", hook)
    monkeypatch.setattr(run, "call", call)
    monkeypatch.setattr(run.precision, "convert_model", convert)
    model, optimizer = make()
    prepared, same_optimizer = accelerator.prepare(model, optimizer)
    # the call's objects are transformed together first (an optimising library), then each model converted
    assert calls == [("drivetrain_transform_objects", "list"), ("convert_model", "Sequential"),
                     ("prepare_objects", True),
                     ("drivetrain_finalize_model", "Engine")]
    assert type(prepared._orig_mod) is Engine and prepared._orig_mod.module is model  # compiled
    assert accelerator._models == [prepared] and same_optimizer is optimizer
    x = torch.randn(3, 4).to(accelerator.device)
    torch.testing.assert_close(prepared(x), model(x))
    assert accelerator.prepare(prepared) is prepared  # prepared already: no model transform again
    assert calls[4:] == [("drivetrain_transform_objects", "list")]  # (plugins see every call's objects)


def test_release_memory_and_free_memory():
    a, b = torch.ones(3), torch.ones(3)
    a, b = release_memory(a, b)
    assert a is None and b is None
    accelerator = Accelerator()
    model, optimizer = make()
    accelerator.prepare(model, optimizer)
    accelerator.free_memory()
    assert accelerator._models == [] and accelerator._optimizers == []


def test_get_logger_logs_on_the_main_process(caplog):
    Accelerator()
    logger = get_logger("drivetrain.test", log_level="INFO")
    with caplog.at_level(logging.INFO, logger="drivetrain.test"):
        logger.info("once", main_process_only=True)
        logger.info("everywhere", main_process_only=False, in_order=True)
    assert [r.message for r in caplog.records] == ["once", "everywhere"]


def test_environment_variable_sets_accumulation_like_accelerate(monkeypatch):
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "3")
    assert Accelerator().gradient_accumulation_steps == 3


def test_self_test_asserts_that_the_main_process_goes_first():
    from drivetrain.cli import self_test
    from drivetrain.state import PartialState

    # (clock, is main, is local main, [(entered, left) of main_process_first, of local_main_process_first])
    good = [("a", True, True, [(0.0, 1.0), (2.0, 3.0)]), ("a", False, False, [(1.5, 1.6), (3.1, 3.2)]),
            ("b", False, True, [(0.1, 0.2), (0.0, 0.5)]), ("b", False, False, [(1.6, 1.7), (0.6, 0.7)])]
    self_test.check_goes_first(good)  # "b" runs on another clock: compared only with its local main
    early = [good[0], ("a", False, False, [(0.5, 0.6), (3.1, 3.2)]), *good[2:]]
    with pytest.raises(AssertionError, match="main_process_first: a process entered the block 0.500s before"):
        self_test.check_goes_first(early)
    early_local = [*good[:3], ("b", False, False, [(1.6, 1.7), (0.4, 0.7)])]
    with pytest.raises(AssertionError, match="local_main_process_first: a process entered"):
        self_test.check_goes_first(early_local)
    self_test.check_processes(PartialState())  # one process: the real check runs through


@pytest.mark.parametrize("keep_torch_compile", [True, False])
def test_unwrap_model_of_a_compiled_data_parallel_model(keep_torch_compile):
    model = torch.nn.Linear(2, 2)
    prepared = torch.compile(torch.nn.DataParallel(model))
    unwrapped = Accelerator().unwrap_model(prepared, keep_torch_compile=keep_torch_compile)
    assert (unwrapped._orig_mod if keep_torch_compile else unwrapped) is model
    assert isinstance(prepared._orig_mod, torch.nn.DataParallel)  # what was prepared stays wrapped


def test_an_accelerator_pickles_without_its_process_run():
    import pickle

    accelerator = Accelerator()
    model, optimizer = make()
    loader = torch.utils.data.DataLoader(torch.arange(6.0), batch_size=2)
    accelerator.prepare(model, optimizer, loader)
    loaded = pickle.loads(pickle.dumps(accelerator))
    # the process's state and run are referenced, not copied; what was prepared is copied
    assert loaded.state.run is accelerator.run and loaded.run is accelerator.run
    assert [batch.tolist() for batch in loaded._dataloaders[0]] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    assert loaded._models[0] is not model and torch.equal(loaded._models[0][0].weight, model[0].weight)


def test_save_model_loads_weights_that_offload_hooks_keep(tmp_path):
    from drivetrain import cpu_offload
    from drivetrain.utils import load_checkpoint_in_model

    model, _ = make()
    expected = {key: value.clone() for key, value in model.state_dict().items()}
    cpu_offload(model, execution_device="cpu")
    assert model[0].weight.device.type == "meta"  # the hooks hold the weights
    accelerator = Accelerator()
    accelerator.save_model(model, tmp_path)
    fresh, _ = make(seed=1)
    load_checkpoint_in_model(fresh, str(tmp_path))
    assert all(torch.equal(fresh.state_dict()[key], value) for key, value in expected.items())


def test_a_quantized_model_offloaded_to_the_cpu_is_refused_before_it_is_prepared():
    model, _ = make()
    model.is_loaded_in_4bit = True
    model.hf_device_map = {"0": "cpu", "2": "disk"}
    accelerator = Accelerator()
    with pytest.raises(ConfigError, match="cannot be trained with CPU or disk offload"):
        accelerator.prepare_model(model)
    assert len(accelerator._models) == 0


def test_the_accelerator_module_offers_the_utils_probes():
    import drivetrain.accelerator as module
    import drivetrain.utils as utils

    assert module.is_bitsandbytes_multi_backend_available is utils.is_bitsandbytes_multi_backend_available
    with pytest.raises(AttributeError, match="drivetrain.accelerator' has no attribute 'no_such_probe'"):
        module.no_such_probe
