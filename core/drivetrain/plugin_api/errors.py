"""The exception types a plugin raises: drivetrain's own, so users catch one family.

Each message is one line that names the fix.
"""

from ..kernel.errors import (
    CheckpointError,
    ConfigError,
    ConfigFileNotFoundError,
    DistributedError,
    DrivetrainError,
    IncompatibleChoiceError,
    LaunchError,
    OutputExistsError,
    PluginError,
    PluginSelectionError,
    PluginWarning,
    UsageError,
)

__all__ = [
    "CheckpointError", "ConfigError", "ConfigFileNotFoundError", "DistributedError", "DrivetrainError",
    "IncompatibleChoiceError", "LaunchError", "OutputExistsError", "PluginError", "PluginSelectionError",
    "PluginWarning", "UsageError",
]
