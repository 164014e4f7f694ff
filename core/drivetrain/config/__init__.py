"""The config file: where it lives, how it is read and validated, how it is written.

Keys are compatible with Accelerate's ``default_config.yaml``, so an existing file works
unchanged. Plugins own their blocks (``fsdp_config:``) through
``drivetrain_register_config_sections``.
"""

from .file import Config, default_config_path, load_config, write_basic_config

__all__ = ["Config", "default_config_path", "load_config", "write_basic_config"]
