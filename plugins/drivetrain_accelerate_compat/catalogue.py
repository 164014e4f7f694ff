"""What Accelerate 1.15 offers that a user may ask for even where the backend is absent.

The plugin that owns a backend contributes its real probe and members; the entries here
only fill the gaps, so a script written for Accelerate gets ``False`` (or the member it
compares against) instead of an ``ImportError``.
"""

from __future__ import annotations

#: Every availability probe of ``accelerate.utils``.
PROBES = (
    "is_4bit_bnb_available", "is_8bit_bnb_available", "is_aim_available", "is_amdsmi_available",
    "is_bf16_available", "is_bitsandbytes_multi_backend_available", "is_bnb_available", "is_boto3_available",
    "is_clearml_available", "is_comet_ml_available", "is_cuda_available", "is_datasets_available",
    "is_deepspeed_available", "is_dvclive_available", "is_fp16_available", "is_fp8_available",
    "is_habana_gaudi1", "is_hpu_available", "is_import_timer_available", "is_lomo_available",
    "is_matplotlib_available", "is_megatron_lm_available", "is_mlflow_available", "is_mlu_available",
    "is_msamp_available", "is_musa_available", "is_neuron_available", "is_npu_available",
    "is_pandas_available", "is_peft_available", "is_pippy_available", "is_pynvml_available",
    "is_pytest_available", "is_rich_available", "is_rocm_available", "is_sagemaker_available",
    "is_schedulefree_available", "is_sdaa_available", "is_swanlab_available", "is_tensorboard_available",
    "is_timm_available", "is_torch_xla_available", "is_torchao_available", "is_torchdata_available",
    "is_torchdata_stateful_dataloader_available", "is_torchvision_available", "is_trackio_available",
    "is_transformer_engine_available", "is_transformer_engine_mxfp8_available", "is_transformers_available",
    "is_triton_available", "is_wandb_available", "is_weights_only_available",
)

#: Members of Accelerate's enumerations, by enumeration.
ENUM_MEMBERS: dict[str, object] = {
    "DistributedType": [
        "NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU",
        "MULTI_HPU", "MULTI_NEURON", "DEEPSPEED", "FSDP", "XLA", "MEGATRON_LM",
    ],
    "PrecisionType": ["no", "fp8", "fp16", "bf16"],
    "RNGType": ["torch", "cuda", "mlu", "sdaa", "musa", "npu", "xla", "xpu", "hpu", "neuron", "generator"],
    "DynamoBackend": [
        "NO", "EAGER", "AOT_EAGER", "INDUCTOR", "AOT_TS_NVFUSER", "NVPRIMS_NVFUSER", "CUDAGRAPHS", "OFI",
        "FX2TRT", "ONNXRT", "TENSORRT", "AOT_TORCHXLA_TRACE_ONCE", "TORCHXLA_TRACE_ONCE", "IPEX", "TVM",
        "HPU_BACKEND",
    ],
    "LoggerType": {
        "ALL": "all", "AIM": "aim", "TENSORBOARD": "tensorboard", "WANDB": "wandb", "COMETML": "comet_ml",
        "MLFLOW": "mlflow", "CLEARML": "clearml", "DVCLIVE": "dvclive", "SWANLAB": "swanlab",
        "TRACKIO": "trackio",
    },
    "CustomDtype": ["fp8", "int4", "int2"],
}
