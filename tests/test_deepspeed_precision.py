"""Precision with DeepSpeed: fp32 batches reach an engine whose model DeepSpeed turned into
bf16 in the model's dtype (the engine does not autocast)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent / "scripts" / "check_deepspeed_inputs.py"
needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not "
                                     "installed (pip install -c constraints.txt -e '.[deepspeed]')")


def _environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DRIVETRAIN_", "ACCELERATE_"))}
    if not torch.cuda.is_available():
        env["DS_ACCELERATOR"] = "cpu"  # DeepSpeed's CPU accelerator; on a GPU machine it finds CUDA itself
    return env


@needs_deepspeed
@pytest.mark.timeout(600)
def test_bf16_engine_trains_on_fp32_features():
    result = subprocess.run([sys.executable, str(SCRIPT), "bf16"], capture_output=True, text=True,
                            env=_environment(), timeout=540)
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
