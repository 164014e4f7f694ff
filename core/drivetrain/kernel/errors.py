"""drivetrain's own exception types. Every message names the fix."""


class DrivetrainError(Exception):
    """Base class of every error drivetrain raises on purpose."""


class PluginError(DrivetrainError):
    """A plugin could not be loaded, validated or used."""


class PluginLoadError(PluginError):
    """Raised in strict mode (DRIVETRAIN_STRICT_PLUGINS=1) when any plugin fails to load."""


class PluginSelectionError(PluginError):
    """The user selected a plugin (or a name) that cannot be used in this run."""


class PluginHookError(PluginError):
    """A third-party plugin's hook raised; the message names the plugin and its distribution,
    and the plugin's own exception is chained (``__cause__``)."""


class ConfigError(DrivetrainError, ValueError):
    """A configuration file, environment variable or argument is invalid."""


class ConfigFileNotFoundError(ConfigError, FileNotFoundError):
    """A config file that was named does not exist (also a ``FileNotFoundError``)."""


class OutputExistsError(ConfigError, FileExistsError):
    """A command would replace an existing file and was not told to (also a ``FileExistsError``)."""


class ModelNotFoundError(DrivetrainError, OSError):
    """The model named cannot be found: not a local folder or file, not a repository on the
    Hugging Face Hub, not a name its library knows (an ``OSError``, as Accelerate raises)."""


class GatedModelError(ModelNotFoundError):
    """The model's Hub repository is gated: it needs accepted conditions and a login."""


class IncompatibleChoiceError(ConfigError):
    """The chosen platform, strategy and precision cannot work together."""


class DistributedError(DrivetrainError, RuntimeError):
    """A distributed operation failed (peer died, timeout, mismatched shapes)."""


class UnsupportedDataError(DrivetrainError, TypeError):
    """An operation on nested tensors met a leaf it cannot handle (a ``TypeError``, as before)."""


class NoExecutableBatchSizeError(DrivetrainError, RuntimeError):
    """``find_executable_batch_size`` ran out of batch sizes to try (a ``RuntimeError``, the type
    Accelerate raises there)."""


class CheckpointError(DrivetrainError):
    """A checkpoint cannot be written or read."""


class CheckpointMismatchError(CheckpointError, RuntimeError):
    """A checkpoint's names do not match the model's in a strict load (a ``RuntimeError``, as
    ``torch.nn.Module.load_state_dict(strict=True)`` raises for the same mismatch)."""


class TrackerError(DrivetrainError, RuntimeError):
    """An experiment tracker failed to start or to log; the message names the tracker (a
    ``RuntimeError``, as the tracker libraries' own failures mostly are)."""


class LossSpikeError(DrivetrainError, RuntimeError):
    """A loss spike stopped the run (``MonitorKwargs(on_spike="stop")``); the message names the
    step, the batch and the checkpoint of the last good state, kept in ``checkpoint``."""

    def __init__(self, message: str, checkpoint: str | None = None) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint


class UsageError(DrivetrainError):
    """The ``Accelerator`` was used in an order or way that cannot work."""


class LaunchError(DrivetrainError):
    """`drivetrain launch` could not start or a child failed."""


class PluginWarning(UserWarning):
    """Warning category for a plugin that was skipped."""
