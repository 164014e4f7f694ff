"""transformers' Trainer on 2 CPU processes, launched by `accelerate launch` (the alias) and by
`drivetrain launch`: DDP with gradient accumulation, checkpoints and resuming, FSDP2 in bf16,
DeepSpeed ZeRO-2 and ZeRO-3, evaluation; PEFT LoRA through the Trainer."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from client_jobs import alias, launch  # noqa: F401  (alias is a fixture)

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def _trained(result: dict, steps: int) -> None:
    assert result["world_size"] == 2 and result["accelerator"] == "drivetrain.facade.accelerator"
    assert len(result["losses"]) == steps and all(math.isfinite(loss) for loss in result["losses"])
    assert math.isfinite(result["eval_loss"])


def test_ddp_with_accumulation_resumes_from_its_checkpoint_where_it_stopped(alias, tmp_path):
    whole = launch(alias, "accelerate", "trainer_job.py", "--output-dir", tmp_path / "whole", "--max-steps", "8",
                   "--accumulation", "2", "--save-steps", "3")
    _trained(whole, 8)
    assert whole["distributed_type"] == "MULTI_CPU" and whole["wrapped"] == "DistributedDataParallel"
    # a run stopped after step 6 goes on from checkpoint-6: steps 7 and 8 as the uninterrupted run's
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "whole" / "checkpoint-6", resumed_dir / "checkpoint-6")
    resumed = launch(alias, "drivetrain", "trainer_job.py", "--output-dir", resumed_dir, "--max-steps", "8",
                     "--accumulation", "2", "--save-steps", "3", "--resume")
    assert resumed["losses"][-2:] == pytest.approx(whole["losses"][-2:], rel=1e-5)
    assert resumed["eval_loss"] == pytest.approx(whole["eval_loss"], rel=1e-5)


def test_fsdp2_in_bf16(alias, tmp_path):
    result = launch(alias, "drivetrain", "trainer_job.py", "--output-dir", tmp_path, "--fsdp", "--bf16")
    _trained(result, 6)
    assert result["fsdp"] and result["distributed_type"] == "FSDP"


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero(alias, tmp_path, stage):
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": stage}, "train_micro_batch_size_per_gpu": "auto",
                                  "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
                                  "gradient_clipping": "auto"}))
    result = launch(alias, "accelerate", "trainer_job.py", "--output-dir", tmp_path / "out", "--deepspeed", config,
                    "--accumulation", "2")
    _trained(result, 6)
    assert result["deepspeed"] and result["distributed_type"] == "DEEPSPEED"


def test_peft_lora_adapters_are_saved_and_load_back(alias, tmp_path):
    result = launch(alias, "accelerate", "trainer_job.py", "--output-dir", tmp_path, "--peft")
    _trained(result, 6)
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(result["adapter_files"])
    assert result["adapter_reloads"]


def test_trl_sft_trainer(alias, tmp_path):
    result = launch(alias, "accelerate", "sft_job.py", "--output-dir", tmp_path)
    assert result["world_size"] == 2 and len(result["losses"]) == 5
    assert all(math.isfinite(loss) for loss in result["losses"])
