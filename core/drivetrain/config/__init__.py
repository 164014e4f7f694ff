"""The config file: where it lives, how it is read and checked, how it is written.

Keys are compatible with Accelerate's ``default_config.yaml``, so an existing file works
unchanged. Plugins own their blocks (``fsdp_config:``) and device-specific top-level keys
through ``drivetrain_register_config_sections``.
"""

from .file import (
    Config,
    accelerate_config_paths,
    basic_config,
    config_from_dict,
    default_config_path,
    find_config_path,
    load_config,
    update_config,
    write_basic_config,
    write_config,
)

__all__ = [
    "Config", "accelerate_config_paths", "basic_config", "config_from_dict", "default_config_path",
    "find_config_path", "load_config", "update_config", "write_basic_config", "write_config",
]
