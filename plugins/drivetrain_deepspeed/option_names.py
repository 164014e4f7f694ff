"""The DeepSpeed options' names, variables and choices that discovery reads (the config
section, the platforms), apart from ``DeepSpeedPlugin`` in :mod:`drivetrain_deepspeed.options`:
loading the plugin then creates no dataclass, which costs milliseconds in every process."""

from __future__ import annotations

OFFLOAD_DEVICES = ("none", "cpu", "nvme")
#: option -> (Accelerate's environment variable, the DeepSpeed config key it fills or None)
OPTIONS: dict[str, tuple[str, str | None]] = {
    "hf_ds_config": ("ACCELERATE_DEEPSPEED_CONFIG_FILE", None),
    "gradient_accumulation_steps": ("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "gradient_accumulation_steps"),
    "gradient_clipping": ("ACCELERATE_GRADIENT_CLIPPING", "gradient_clipping"),
    "zero_stage": ("ACCELERATE_DEEPSPEED_ZERO_STAGE", "zero_optimization.stage"),
    "offload_optimizer_device": ("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
                                 "zero_optimization.offload_optimizer.device"),
    "offload_param_device": ("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "zero_optimization.offload_param.device"),
    "offload_optimizer_nvme_path": ("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH",
                                    "zero_optimization.offload_optimizer.nvme_path"),
    "offload_param_nvme_path": ("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH",
                                "zero_optimization.offload_param.nvme_path"),
    "zero3_init_flag": ("ACCELERATE_DEEPSPEED_ZERO3_INIT", None),
    "zero3_save_16bit_model": ("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL",
                               "zero_optimization.stage3_gather_16bit_weights_on_model_save"),
    "transformer_moe_cls_names": ("ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES", None),
}
#: drivetrain platform (or device type) -> DeepSpeed accelerator name (``DS_ACCELERATOR``)
DS_ACCELERATORS = {"cpu": "cpu", "cuda": "cuda", "xpu": "xpu", "npu": "npu", "mps": "mps", "hpu": "hpu",
                   "mlu": "mlu"}
