"""Helpers users import from ``drivetrain.utils`` (Accelerate's ``accelerate.utils``).

Importing this package imports nothing heavy: ``_NAMES`` says which submodule defines each
public name, and a name is imported on first access. Names a plugin contributes
(``DeepSpeedPlugin``, ``is_deepspeed_available``) come from the plugin that owns them
(``drivetrain_public_names``, keys ``"utils.<name>"`` or top-level names), and an
availability probe of a backend no plugin provides answers ``False`` (a fallback name).
To add names: add them to their submodule's tuple below.
"""

from __future__ import annotations

from typing import Any

from ..kernel.contributed import surface_getattr

# submodule (relative to drivetrain) -> the public names it defines
_NAMES: dict[str, tuple[str, ...]] = {
    "selection.enums": (
        "ComputeEnvironment", "CustomDtype", "DistributedType", "DynamoBackend", "LoggerType", "PrecisionType",
        "RNGType", "SageMakerDistributedType",
    ),
    "runtime.kwargs_handlers": (
        "AutocastKwargs", "DataLoaderConfiguration", "GradientAccumulationPlugin", "GradScalerKwargs",
        "InitProcessGroupKwargs", "KwargsHandler", "MonitorKwargs", "ProfileKwargs", "ProjectConfiguration",
        "TorchDynamoPlugin",
    ),
    "utils.operations": (
        "CannotPadNestedTensorWarning", "ConvertOutputsToFp32", "DistributedOperationException",
        "TensorInformation", "broadcast", "broadcast_object_list", "chained_operation", "concatenate",
        "convert_outputs_to_fp32", "convert_to_fp32", "copy_tensor_to_devices", "find_batch_size", "find_device",
        "gather", "gather_for_metrics", "gather_object", "get_data_structure", "get_shape", "honor_type",
        "ignorant_find_batch_size", "initialize_tensors", "is_namedtuple", "is_tensor_information",
        "is_torch_tensor", "listify", "pad_across_processes", "pad_input_tensors", "recursively_apply", "reduce",
        "send_to_device", "slice_tensors", "verify_operation", "wait_for_everyone",
    ),
    "services.rng": ("set_seed", "synchronize_rng_state", "synchronize_rng_states"),
    "selection.constants": (
        "MITA_PROFILING_AVAILABLE_PYTORCH_VERSION", "MODEL_NAME", "OPTIMIZER_NAME", "PROFILE_PATTERN_NAME",
        "RNG_STATE_NAME", "SAFE_MODEL_NAME", "SAFE_WEIGHTS_INDEX_NAME", "SAFE_WEIGHTS_NAME",
        "SAFE_WEIGHTS_PATTERN_NAME", "SAMPLER_NAME", "SCALER_NAME", "SCHEDULER_NAME",
        "TORCH_DISTRIBUTED_OPERATION_TYPES", "TORCH_LAUNCH_PARAMS", "WEIGHTS_INDEX_NAME", "WEIGHTS_NAME",
        "WEIGHTS_PATTERN_NAME",
    ),
    "runtime.environment_helpers": (
        "are_libraries_initialized", "check_os_kernel", "clear_environment", "convert_dict_to_env_variables",
        "get_current_device_type",
        "get_cpu_distributed_information", "get_int_from_env", "is_port_in_use", "parse_choice_from_env",
        "parse_flag_from_env", "patch_environment", "purge_accelerate_environment", "str_to_bool",
    ),
    "services.availability": (
        "is_amdsmi_available", "is_bf16_available", "is_boto3_available", "is_datasets_available",
        "is_fp16_available", "is_import_timer_available", "is_lomo_available", "is_matplotlib_available",
        "is_pandas_available", "is_peft_available", "is_pippy_available", "is_pynvml_available",
        "is_pytest_available", "is_rich_available", "is_sagemaker_available", "is_schedulefree_available",
        "is_timm_available", "is_torchdata_available", "is_torchdata_stateful_dataloader_available",
        "is_torchvision_available", "is_transformers_available", "is_triton_available",
        "is_weights_only_available",
    ),
    "selection.versions": ("compare_versions", "is_torch_version"),
    "services.other": (
        "clean_state_dict_for_safetensors", "compile_regions", "convert_bytes", "extract_model_from_parallel",
        "get_module_children_bottom_up", "get_pretty_name", "has_compiled_regions", "is_compiled_module",
        "is_peft_model", "load",
        "merge_dicts", "model_has_dtensor", "recursive_getattr", "save",
    ),
    "cli.launch_environment": ("PrepareForLaunch", "_filter_args", "prepare_multi_gpu_env",
                               "prepare_simple_launcher_cmd_env", "prepare_sagemager_args_inputs"),
    # through the compat module: importing `drivetrain.utils.tqdm` as a module must happen before the
    # function is filed here, or the import system would later put the module in its place
    "utils.tqdm": ("tqdm",),
    "services.memory": ("find_executable_batch_size", "release_memory"),
    "config": ("write_basic_config",),
    "services.big_model.weights_loading": ("load_checkpoint_in_model", "load_state_dict"),
    "services.big_model.modeling": (
        "align_module_device", "calculate_maximum_sizes", "check_tied_parameters_in_config",
        "check_tied_parameters_on_same_device", "compute_module_sizes", "convert_file_size_to_int",
        "dtype_byte_size", "ensure_weights_retied", "find_tied_parameters", "get_max_layer_size", "get_max_memory",
        "has_offloaded_params", "id_tensor_storage", "named_module_tensors", "retie_parameters",
        "set_module_tensor_to_device", "get_grad_scaler", "get_mixed_precision_context_manager",
    ),
    "services.big_model.device_map": ("check_device_map", "get_balanced_memory", "infer_auto_device_map"),
    "services.big_model.offload": (
        "OffloadedWeightsLoader", "PrefixedDataset", "extract_submodules_state_dict", "load_offloaded_weight",
        "load_offloaded_weights", "offload_state_dict", "offload_weight", "save_offload_index",
    ),
}

_WHERE: dict[str, str] = {name: module for module, names in _NAMES.items() for name in names}


# a name of _NAMES, a submodule (`drivetrain.utils.rich`), then what plugins contribute to
# `utils` or to `drivetrain` itself (Accelerate's accelerate.utils offers DeepSpeedPlugin too)
__getattr__ = surface_getattr(__name__, lazy={name: f"drivetrain.{module}:{name}" for name, module in _WHERE.items()},
                              submodules=True, also=("",), cache=True)


def __dir__() -> list[str]:
    from ..kernel.contributed import module_public_names

    return sorted(set(globals()) | set(_WHERE) | set(module_public_names("utils")) | set(module_public_names()))


__all__ = sorted(_WHERE)
