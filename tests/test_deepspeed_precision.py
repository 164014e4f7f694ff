"""Precision with DeepSpeed: fp32 batches reach an engine whose model DeepSpeed turned into
bf16 in the model's dtype (the engine does not autocast)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import clean_environ

SCRIPT = Path(__file__).resolve().parent / "scripts" / "check_deepspeed_inputs.py"
needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not "
                                     "installed (pip install -c constraints.txt -e '.[deepspeed]')")


def _environment() -> dict[str, str]:
    env = clean_environ()
    if not torch.cuda.is_available():
        env["DS_ACCELERATOR"] = "cpu"  # DeepSpeed's CPU accelerator; on a GPU machine it finds CUDA itself
    return env


@needs_deepspeed
@pytest.mark.timeout(600)
def test_bf16_engine_trains_on_fp32_features(deepspeed_ops):
    result = subprocess.run([sys.executable, str(SCRIPT), "bf16"], capture_output=True, text=True,
                            env={**_environment(), **deepspeed_ops}, timeout=540)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "CHECK-DEEPSPEED-INPUTS-OK bf16" in result.stdout


def test_inputs_are_cast_only_when_floating_and_only_to_the_engine_dtype():
    from drivetrain_deepspeed.inputs import _cast

    batch = {"x": torch.randn(2, 3), "ids": torch.arange(2), "nested": [torch.ones(1, dtype=torch.float64)],
             "name": "text", "same": torch.zeros(1, dtype=torch.bfloat16)}
    cast = _cast(batch, torch.bfloat16)
    assert cast["x"].dtype == torch.bfloat16 and cast["nested"][0].dtype == torch.bfloat16
    assert cast["ids"].dtype == torch.int64 and cast["name"] == "text"
    assert cast["same"] is batch["same"]
    torch.testing.assert_close(cast["x"].float(), batch["x"], atol=1e-2, rtol=1e-2)


class _Run:
    """A run whose hooks reach the given role objects only (as ``Run.call`` does for the chosen ones)."""

    def __init__(self, precision, *roles, recipe=None):
        import types

        self.handler_kwargs = {"MSAMPRecipeKwargs": recipe} if recipe is not None else {}
        self.selection = types.SimpleNamespace(precision=precision)
        self.roles = roles

    def call(self, name, **kwargs):
        answers = (getattr(role, name)(run=self, **kwargs) for role in self.roles if hasattr(role, name))
        return next((answer for answer in answers if answer is not None), None)


def test_msamp_asks_the_strategy_to_run_it_and_never_writes_deepspeeds_options(fresh_state):
    from drivetrain.plugin_api import PrecisionSpec
    from drivetrain_deepspeed.options import DeepSpeedPlugin
    from drivetrain_deepspeed.strategy import DeepSpeedStrategy
    from drivetrain_msamp.precision import MSAMPPrecision
    from drivetrain_msamp.recipe import MSAMPRecipeKwargs

    spec = PrecisionSpec(name="fp8", backend="msamp")
    strategy = DeepSpeedStrategy(None)
    strategy.plugins = {"default": DeepSpeedPlugin(zero_stage=2)}
    strategy.select_deepspeed_plugin("default")
    precision = MSAMPPrecision(None, spec)
    run = _Run(spec, strategy, recipe=MSAMPRecipeKwargs(opt_level="O1"))
    extension = precision.drivetrain_configure_run(run=run, accelerator=None)
    assert precision.adopted and extension.fp8_backend == "MSAMP"
    assert (strategy.deepspeed_plugin.enable_msamp, strategy.deepspeed_plugin.msamp_opt_level) == (True, "O1")
    # the engine converts: MS-AMP leaves the prepare call to the strategy
    assert precision.drivetrain_prepare_objects(objects=[torch.nn.Linear(1, 1)], run=run, device_placement=[True],
                                                accelerator=None) is None
    # a strategy that applies no precision (none answers): MS-AMP converts model and optimizer itself
    alone = MSAMPPrecision(None, spec)
    alone.drivetrain_configure_run(run=_Run(spec), accelerator=None)
    assert not alone.adopted
    # DeepSpeed adopts MS-AMP only
    other = DeepSpeedStrategy(None)
    other.plugins = {"default": DeepSpeedPlugin(zero_stage=2)}
    other.select_deepspeed_plugin("default")
    assert other.drivetrain_adopt_precision(run=None, precision=PrecisionSpec(name="fp8", backend="te"),
                                            recipe=None) is None
    assert not other.deepspeed_plugin.enable_msamp


class _ProcessRun:
    """A run as a role object holds it (weakly): only its identity matters here."""


def test_deepspeed_owns_the_runs_precision_and_its_engine_applies_fp16_and_bf16():
    import contextlib

    from drivetrain.plugin_api import Precision, PrecisionSpec
    from drivetrain_deepspeed.strategy import DeepSpeedStrategy, EnginePrecision

    class Converting(Precision):
        def convert_model(self, model):
            model.converted = True
            return model

        def autocast(self, kwargs):
            raise AssertionError("under DeepSpeed the engine runs the precision: no autocast of the run's")

    run = _ProcessRun()
    strategy = DeepSpeedStrategy(run)
    assert strategy.accumulates_gradients and strategy.make_grad_scaler({}) is None
    for name, converted in (("bf16", False), ("fp16", False), ("fp8", True)):  # fp8 layers are still swapped
        owned = strategy.own_precision(Converting(run, PrecisionSpec(name=name, backend="some")))
        assert isinstance(owned, EnginePrecision) and owned.name == name and owned.run is run
        assert isinstance(owned.autocast({}), contextlib.nullcontext) and owned.make_grad_scaler({}) is None
        assert getattr(owned.convert_model(torch.nn.Linear(1, 1)), "converted", False) is converted
