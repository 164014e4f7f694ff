"""drivetrain: one PyTorch script on any number of processes, machines and accelerators.

Importing this package is cheap: every public name is resolved on first access, and names
that belong to a backend (``DeepSpeedPlugin``, ...) come from the plugin that owns them.
"""

from __future__ import annotations

from typing import Any

from .kernel.contributed import surface_getattr
from .kernel.version import PLUGIN_API_VERSION, __version__

# Public names of the core and where they live; resolved on first access.
_CORE_NAMES: dict[str, str] = {}


def _export(module: str, *names: str) -> None:
    for name in names:
        _CORE_NAMES[name] = f"drivetrain.{module}:{name}"


_export("plugin_manager", "get_plugin_manager")
_export("errors", "DrivetrainError", "PluginError", "ConfigError", "CheckpointError", "DistributedError")
_export("errors", "LaunchError")
_export("runtime.state", "PartialState", "AcceleratorState", "GradientState")
_export("selection.enums", "DistributedType", "PrecisionType", "LoggerType", "RNGType", "ComputeEnvironment",
        "DynamoBackend")
_export("services.launchers", "notebook_launcher", "debug_launcher")
_export("config", "write_basic_config", "load_config")
_export("facade.accelerator", "Accelerator")
_export("runtime.kwargs_handlers", "AutocastKwargs", "GradScalerKwargs", "InitProcessGroupKwargs", "ProfileKwargs",
        "GradientAccumulationPlugin", "DataLoaderConfiguration", "ProjectConfiguration", "TorchDynamoPlugin",
        "MonitorKwargs")
_export("runtime.optimizer", "AcceleratedOptimizer")
_export("runtime.scheduler", "AcceleratedScheduler")
_export("facade.local_sgd", "LocalSGD")
_export("services.memory", "find_executable_batch_size", "release_memory")
_export("runtime.process_logging", "get_logger")
_export("utils", "rich", "is_rich_available")
_export("services.big_model.weights_loading", "load_checkpoint_in_model")
_export("services.big_model.dispatch", "init_empty_weights", "init_on_device", "cpu_offload",
        "cpu_offload_with_hook", "disk_offload", "dispatch_model", "load_checkpoint_and_dispatch")
_export("services.big_model.device_map", "infer_auto_device_map")
_export("services.big_model.inference", "prepare_pippy")
_export("services.data_loader", "skip_first_batches", "prepare_data_loader")
_export("services.rng", "set_seed", "synchronize_rng_states")
_export("utils.operations", "broadcast", "broadcast_object_list", "gather", "gather_object", "reduce",
        "pad_across_processes", "send_to_device", "wait_for_everyone")


# a core name of _CORE_NAMES, a submodule, then a name a plugin contributes (DeepSpeedPlugin)
__getattr__ = surface_getattr(__name__, lazy=_CORE_NAMES, submodules=True, cache=True)


def __dir__() -> list[str]:
    from .kernel.contributed import all_plugin_public_names

    return sorted(set(globals()) | set(_CORE_NAMES) | set(all_plugin_public_names()))


__all__ = ["__version__", "PLUGIN_API_VERSION"]
