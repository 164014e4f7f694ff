"""fp8 precision plugins: selection, recipes, launch options, conversions, refusals, and real
torchao float8 training (emulated on the CPU, on float8 tensor cores on a GPU of compute
capability 8.9 or newer)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

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


def test_fp8_members_are_absent_from_other_precisions():
    accelerator = Accelerator(mixed_precision="bf16")
    assert accelerator.run.extension_attribute.__self__ is accelerator.run
    with pytest.raises(AttributeError):
        accelerator.run.extension_attribute("fp8_backend")


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
