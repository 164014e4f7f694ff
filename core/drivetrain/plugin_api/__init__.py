"""The plugin API: the one surface a drivetrain plugin imports, built-in or third-party.

A plugin imports ``drivetrain.plugin_api`` (or one of its submodules) and nothing else of
drivetrain; what it needs and cannot find here is a missing piece of this API. Everything is
available from this package; the submodules group it by role:

- ``descriptors``: ``hookimpl``, ``PluginInfo``, ``Probe`` and the descriptors registration
  hooks return (``PlatformSpec``, ``StrategySpec``, ``PrecisionSpec``, ...), ``resolve``;
- ``errors``: the exception types plugins raise;
- ``roles``: ``Run``, and ``Strategy`` and ``Precision``, the base classes of a run's role
  objects (what a strategy and a precision do at each step);
- ``environment``, ``options``: environment variables (with Accelerate's aliases), launch
  options, kwargs handlers, the config file's place;
- ``config_file``: a config file's keys as written, read and written by a command that works on the file;
- ``probes``: installed libraries and versions, names other plugins contribute;
- ``platform``, ``cluster``, ``tracking``, ``launching``: the base classes and helpers of a
  platform, a cluster environment, a tracker, a launcher;
- ``training``, ``checkpoints``, ``modeling``: the run's optimizer and scheduler wrappers and
  state, the safe checkpoint path, model helpers.

Importing this package is cheap (it runs at plugin discovery): no torch, no optional
library. Names whose module needs torch are imported when first touched (``Platform``,
``safe_torch_load``, ``AcceleratedOptimizer``...). The API is versioned with the hook specs:
``PLUGIN_API_VERSION`` (a plugin declares the version it was written for in ``PluginInfo``).
"""

from __future__ import annotations

import importlib
from typing import Any

from ..kernel.contributed import surface_getattr
from ..kernel.version import PLUGIN_API_VERSION
from . import descriptors, errors
from .descriptors import *  # noqa: F403 (the descriptors are this package's own names)
from .errors import *  # noqa: F403
from .roles import Precision, Run, Strategy
from .options import BackendFlag, bool_argument

# Names resolved on first use, by the submodule that offers them (their modules are heavier or
# import torch). A test checks that each submodule offers exactly the names listed for it.
_LAZY_BY_MODULE: dict[str, tuple[str, ...]] = {
    "options": ("KwargsHandler", "default_config_path"),
    "config_file": ("read_config_file", "write_config_file"),
    "probes": ("absent_probe", "compare_versions", "contributed", "is_package_available", "is_torch_version"),
    "cluster": ("SINGLE_PROCESS", "ClusterEnvironment", "int_var"),
    "platform": ("Platform",),
    "tracking": ("GeneralTracker", "LibraryRunTracker", "flatten_config", "images_by_key", "is_number",
                 "plain_value"),
    "launching": ("AttemptWatchers", "CHILD_MODULE", "ERRORS_DIR_VARIABLE", "ExitWatcher", "PREEMPTED_EXIT_CODE",
                  "describe_exit",
                  "failure_summary", "find_executable", "last_stderr_line", "prepare_multi_gpu_env",
                  "preemption_grace", "program_version", "recorded_collectives", "recorded_failures"),
    "training": ("AcceleratedOptimizer", "AcceleratedScheduler", "GradientState", "PartialState",
                 "PreparedObjects", "convert_to_fp32", "prepared_objects", "recursively_apply",
                 "watch_module_functions", "watched"),
    "checkpoints": ("DeferredWrites", "check_optimizer", "copy_to_host", "load_tree", "output_write_error",
                    "read_model_files", "refuse_unusable_output", "safe_torch_load", "save_tree", "write_model_files"),
    "modeling": ("dispatch_model", "load_checkpoint_in_model", "repeated_blocks", "resolve_device",
                 "resolve_device_map"),
}
_LAZY = {name: module for module, names in _LAZY_BY_MODULE.items() for name in names}


__getattr__ = surface_getattr(__name__, cache=True,
                              lazy={name: f"{__name__}.{module}:{name}" for name, module in _LAZY.items()})


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = ["PLUGIN_API_VERSION", *descriptors.__all__, *errors.__all__, "BackendFlag", "Precision", "Run", "Strategy",
           "bool_argument", *_LAZY]
