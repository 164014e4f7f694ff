"""fp8 precision plugins: selection, recipes, launch options, conversions, refusals, and real
torchao float8 training (emulated on the CPU, on float8 tensor cores on a GPU of compute
capability 8.9 or newer)."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from conftest import clean_environ

from drivetrain import Accelerator
from drivetrain.errors import DrivetrainError

pytestmark = pytest.mark.usefixtures("fresh_state")

HAS_TORCHAO = importlib.util.find_spec("torchao") is not None
needs_torchao = pytest.mark.skipif(not HAS_TORCHAO, reason="torchao is not installed (pip install 'drivetrain[torchao]')")


def _fp8_hardware_reason() -> str | None:
    if torch.cuda.is_available():
        if torch.cuda.get_device_capability() < (8, 9):
            return "the GPU has no float8 units (compute capability < 8.9)"
    return None


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 10))


def _train(accelerator: Accelerator, steps: int = 30) -> list[float]:
    model = _mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(64, 32, generator=generator).to(accelerator.device)
    y = (x[:, :10] * 2).argmax(-1)
    losses = []
    for _ in range(steps):
        with accelerator.autocast():
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


# ------------------------------------------------------------------ contract (everywhere)


def test_filter_keeps_first_last_and_sizes_float8_cannot_multiply():
    from drivetrain.utils import filter_first_and_last_linear_layers

    model = _mlp()
    keep = filter_first_and_last_linear_layers(model)
    chosen = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)
              and keep(module, name)]
    assert chosen == ["2", "4"]
    odd = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 32), torch.nn.Linear(32, 10),
                              torch.nn.Linear(10, 16))
    keep = filter_first_and_last_linear_layers(odd)
    assert [keep(odd[i], str(i)) for i in range(4)] == [False, True, False, False]


def test_ao_recipe_reads_launch_variables(monkeypatch):
    from drivetrain import AORecipeKwargs

    assert AORecipeKwargs().enable_fsdp_float8_all_gather is True
    monkeypatch.setenv("ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER", "false")
    monkeypatch.setenv("ACCELERATE_FP8_PAD_INNER_DIM", "0")
    recipe = AORecipeKwargs()
    assert recipe.enable_fsdp_float8_all_gather is False and recipe.pad_inner_dim is False
    assert AORecipeKwargs(pad_inner_dim=True).pad_inner_dim is True
    assert AORecipeKwargs.precision_backend == "ao"


def test_launch_options_parse_and_reach_the_children():
    from drivetrain.cli.launch_cmd import build_parser

    parser = build_parser()
    args = parser.parse_args(["--mixed-precision", "fp8", "--fp8_backend", "AO", "--fp8-pad-inner-dim", "false",
                              "--fp8-enable-fsdp-float8-all-gather", "true", "train.py"])
    assert args.precision_backend == "ao" and args.fp8_pad_inner_dim is False
    from drivetrain.plugin_manager import get_plugin_manager

    env = {}
    for answer in get_plugin_manager().hooks.hook.drivetrain_launch_environment(args=args):
        env.update(answer or {})
    assert env["ACCELERATE_FP8_PAD_INNER_DIM"] == "false"
    assert env["ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER"] == "true"
    with pytest.raises(SystemExit):
        parser.parse_args(["--fp8-backend", "nope", "train.py"])


def test_other_precisions_answer_the_fp8_members_as_accelerate_does():
    accelerator = Accelerator(mixed_precision="bf16")
    with pytest.raises(AttributeError):
        accelerator.run.extension_attribute("fp8_backend")  # no fp8 plugin is active...
    # ...so the members read Accelerate's answers for a run without fp8
    assert (accelerator.fp8_enabled, accelerator.fp8_backend, accelerator.has_fp8_handler) == (False, None, False)
    assert accelerator.delayed_fp8_autocast is False
    assert [accelerator.fp8_recipe_handler, accelerator.te_recipe_handler, accelerator.msamp_recipe_handler,
            accelerator.ao_recipe_handler] == [None] * 4
    with pytest.raises(AttributeError):
        accelerator.fp8_enabeld  # noqa: B018 - a typo is still an error


def test_an_unknown_backend_is_refused_with_the_installed_ones():
    from drivetrain.kwargs_handlers import KwargsHandler

    class Recipe(KwargsHandler):
        precision_backend = "nonesuch"

    with pytest.raises(DrivetrainError, match="nonesuch"):
        Accelerator(mixed_precision="fp8", kwargs_handlers=[Recipe()])


# ------------------------------------------------------------------ torchao for real


@needs_torchao
def test_conversion_on_meta_and_cpu_modules():
    from drivetrain.utils import convert_model_to_fp8_ao, has_ao_layers

    for device in ("meta", "cpu"):
        with torch.device(device):
            model = _mlp()
        assert not has_ao_layers(model)
        convert_model_to_fp8_ao(model)
        kinds = [type(m).__name__ for m in model if not isinstance(m, torch.nn.ReLU)]
        assert kinds == ["Linear", "Float8Linear", "Float8Linear", "Linear"], kinds
        assert has_ao_layers(model)
        assert model[2].weight.device.type == device


@needs_torchao
def test_fp8_selects_torchao_and_exposes_the_members():
    from drivetrain import AORecipeKwargs

    reason = _fp8_hardware_reason()
    if reason:
        with pytest.raises(DrivetrainError, match="compute capability 8.9"):
            Accelerator(mixed_precision="fp8")
        pytest.skip(reason)
    recipe = AORecipeKwargs(module_filter_fn=lambda module, name: name == "2")
    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[recipe])
    assert accelerator.mixed_precision == "fp8"
    assert accelerator.fp8_backend == "AO" and accelerator.fp8_enabled and accelerator.has_fp8_handler
    assert accelerator.ao_recipe_handler is recipe and accelerator.te_recipe_handler is None
    assert accelerator.delayed_fp8_autocast is False
    model = accelerator.prepare(_mlp())
    assert [type(m).__name__ for m in model][::2] == ["Linear", "Float8Linear", "Linear", "Linear"]
    assert accelerator.prepare(model) is model  # converted once


@needs_torchao
def test_fp8_that_converts_no_layer_says_the_model_trains_in_full_precision():
    from drivetrain import AORecipeKwargs

    reason = _fp8_hardware_reason()
    if reason:
        pytest.skip(reason)
    accelerator = Accelerator(cpu=True, mixed_precision="fp8")
    small = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    with pytest.warns(UserWarning, match=r"converted none of Sequential's 2 linear layer\(s\) \(torchao converts "
                                         r"linear layers whose sizes are multiples of 16.*full precision: choose"):
        accelerator.prepare(small)
    keep_all = AORecipeKwargs(module_filter_fn=lambda module, name: False)
    accelerator = Accelerator(cpu=True, mixed_precision="fp8", kwargs_handlers=[keep_all])
    with pytest.warns(UserWarning, match="the module_filter_fn of AORecipeKwargs kept every layer"):
        accelerator.prepare(_mlp())


@needs_torchao
def test_fp8_trains_like_bf16():
    reason = _fp8_hardware_reason()
    if reason:
        pytest.skip(reason)
    fp8 = _train(Accelerator(mixed_precision="fp8"), steps=60)
    from drivetrain.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    reference = _train(Accelerator(mixed_precision="bf16"), steps=60)
    assert fp8[-1] < 0.6 * fp8[0], fp8
    assert abs(fp8[-1] - reference[-1]) < 0.25 * reference[0], (fp8, reference)


# ------------------------------------------------------------------ Transformer Engine and MS-AMP (contract)


HAS_TE = importlib.util.find_spec("transformer_engine") is not None
HAS_MSAMP = importlib.util.find_spec("msamp") is not None


def test_te_recipe_from_arguments_and_launch_variables(monkeypatch):
    from drivetrain import FP8RecipeKwargs, TERecipeKwargs

    recipe = TERecipeKwargs()
    assert (recipe.fp8_format, recipe.margin, recipe.interval, recipe.amax_history_len) == ("HYBRID", 0, 1, 1024)
    assert recipe.amax_compute_algo == "most_recent" and recipe.use_autocast_during_eval is False
    for name, value in (("FORMAT", "e4m3"), ("MARGIN", "2"), ("AMAX_HISTORY_LEN", "16"),
                        ("AMAX_COMPUTE_ALGO", "max"), ("OVERRIDE_LINEAR_PRECISION", "false,true,false"),
                        ("USE_AUTOCAST_DURING_EVAL", "true")):
        monkeypatch.setenv(f"ACCELERATE_FP8_{name}", value)
    recipe = TERecipeKwargs(margin=3)
    assert (recipe.fp8_format, recipe.margin, recipe.amax_history_len, recipe.amax_compute_algo) == ("E4M3", 3, 16, "max")
    assert recipe.override_linear_precision == (False, True, False) and recipe.use_autocast_during_eval
    with pytest.raises(DrivetrainError, match="fp8_format must be one of"):
        TERecipeKwargs(fp8_format="E3M4")
    with pytest.raises(DrivetrainError, match="MSAMPRecipeKwargs"):
        FP8RecipeKwargs(backend="MSAMP")
    assert FP8RecipeKwargs().precision_backend == "te"


def test_msamp_recipe_levels(monkeypatch):
    from drivetrain import MSAMPRecipeKwargs

    assert MSAMPRecipeKwargs().opt_level == "O2"
    monkeypatch.setenv("ACCELERATE_FP8_OPT_LEVEL", "o1")
    assert MSAMPRecipeKwargs().opt_level == "O1"
    with pytest.raises(DrivetrainError, match="O1 or O2"):
        MSAMPRecipeKwargs(opt_level="O3")


def test_every_accelerate_fp8_launch_option_parses():
    from drivetrain.cli.launch_cmd import build_parser

    args = build_parser().parse_args([
        "--mixed_precision", "fp8", "--fp8_backend", "te", "--fp8_format", "e5m2", "--fp8_margin", "1",
        "--fp8_interval", "2", "--fp8_amax_history_len", "8", "--fp8_amax_compute_algo", "max",
        "--fp8_override_linear_precision", "false,false,true", "--fp8_opt_level", "o1",
        "--fp8_use_autocast_during_eval", "--fp8_enable_fsdp_float8_all_gather", "false",
        "--fp8_pad_inner_dim", "true", "train.py"])
    assert (args.precision_backend, args.fp8_format, args.fp8_opt_level) == ("te", "E5M2", "O1")
    from drivetrain.plugin_manager import get_plugin_manager

    env = {}
    for answer in get_plugin_manager().hooks.hook.drivetrain_launch_environment(args=args):
        env.update(answer or {})
    assert env["ACCELERATE_FP8_FORMAT"] == "E5M2" and env["ACCELERATE_FP8_AMAX_HISTORY_LEN"] == "8"
    assert env["ACCELERATE_FP8_OPT_LEVEL"] == "O1" and env["ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL"] == "true"
    assert env["ACCELERATE_FP8_OVERRIDE_LINEAR_PRECISION"] == "false,false,true"


@pytest.mark.skipif(HAS_TE and torch.cuda.is_available(), reason="Transformer Engine can run here")
def test_te_backend_refused_with_what_it_needs():
    from drivetrain import TERecipeKwargs

    with pytest.raises(DrivetrainError, match=r"te: .*(transformer-engine|compute capability 8.9)"):
        Accelerator(mixed_precision="fp8", kwargs_handlers=[TERecipeKwargs()])


@pytest.mark.skipif(HAS_MSAMP and torch.cuda.is_available(), reason="MS-AMP can run here")
def test_msamp_backend_refused_with_what_it_needs():
    from drivetrain import MSAMPRecipeKwargs

    with pytest.raises(DrivetrainError, match=r"msamp: .*(MS-AMP|compute capability 8.9)"):
        Accelerator(mixed_precision="fp8", kwargs_handlers=[MSAMPRecipeKwargs()])


def test_probes_answer_through_utils():
    from drivetrain.utils import (check_cuda_fp8_capability, is_fp8_available, is_msamp_available,
                                  is_torchao_available, is_transformer_engine_available,
                                  is_transformer_engine_mxfp8_available)

    assert is_torchao_available() is HAS_TORCHAO
    assert is_transformer_engine_available() is HAS_TE and is_msamp_available() is HAS_MSAMP
    if not torch.cuda.is_available():
        assert check_cuda_fp8_capability() is False
        assert is_fp8_available() is HAS_TORCHAO  # emulated by torchao on the CPU
    if not HAS_TE:
        assert is_transformer_engine_mxfp8_available() is False


@pytest.mark.cuda
@pytest.mark.skipif(not (HAS_TE and torch.cuda.is_available()), reason="needs Transformer Engine and a CUDA GPU "
                    "of compute capability 8.9 or newer")
def test_te_swaps_layers_and_trains():  # pragma: no cover - needs the hardware
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("the GPU has no float8 units (compute capability < 8.9)")
    from drivetrain import TERecipeKwargs
    from drivetrain.utils import has_transformer_engine_layers

    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[TERecipeKwargs()])
    assert accelerator.fp8_backend == "TE"
    losses = _train(accelerator, steps=60)
    assert has_transformer_engine_layers(accelerator._models[0])
    assert losses[-1] < 0.6 * losses[0], losses


@needs_torchao
@pytest.mark.usefixtures("private_group")
@pytest.mark.parametrize("float8_all_gather", [True, False])
def test_fp8_layers_under_fsdp2_gather_in_float8(float8_all_gather):
    from drivetrain import AORecipeKwargs, FullyShardedDataParallelPlugin

    reason = _fp8_hardware_reason()
    if reason:
        pytest.skip(reason)
    recipe = AORecipeKwargs(module_filter_fn=lambda module, name: isinstance(module, torch.nn.Linear),
                            enable_fsdp_float8_all_gather=float8_all_gather)
    accelerator = Accelerator(mixed_precision="fp8", fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2),
                              kwargs_handlers=[recipe])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert [type(m).__name__ for m in model] == ["Float8Linear", "ReLU", "Float8Linear"]  # converted, then sharded
    local = type(model[0].weight._local_tensor).__name__
    assert (local == "WeightWithDynamicFloat8CastTensor") is float8_all_gather
    x = torch.randn(16, 32).to(accelerator.device)
    losses = []
    for _ in range(10):
        loss = model(x).float().pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses


@needs_torchao
def test_launch_options_select_torchao_in_the_child():
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent / "scripts" / "check_fp8_launch.py"
    env = clean_environ()
    result = subprocess.run([sys.executable, "-m", "drivetrain", "launch", "--cpu", "--num-processes", "1",
                             "--mixed-precision", "fp8", "--fp8_backend", "AO", "--fp8-pad-inner-dim", "false",
                             str(script)], capture_output=True, text=True, env=env, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("CHECK-FP8-LAUNCH "))
    assert json.loads(line.split(" ", 1)[1]) == {"precision": "fp8", "backend": "AO", "pad_inner_dim": False,
                                                 "layers": ["Linear", "Float8Linear", "Linear"]}


def test_torchao_required_says_how_to_install_it(monkeypatch):
    from drivetrain.utils import torchao_required
    from drivetrain_torchao import capability

    @torchao_required
    def quantize(value):
        return value * 2

    if HAS_TORCHAO:
        assert quantize(3) == 6
    monkeypatch.setattr(capability, "is_torchao_available", lambda: False)
    with pytest.raises(DrivetrainError, match=r"quantize needs torchao; install it with pip install 'drivetrain\[torchao\]'"):
        quantize(3)
