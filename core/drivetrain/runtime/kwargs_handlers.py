"""Kwargs handlers: small dataclasses that customise one part of a run.

``Accelerator(kwargs_handlers=[...])`` files each handler in ``run.handler_kwargs`` under its
class name; the plugin that owns that part reads it. Handlers that concern no particular
backend live here; a plugin contributes its own through ``drivetrain_public_names``.
"""

from __future__ import annotations

import contextvars
import copy
import numbers
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

from ..kernel.errors import ConfigError

# Set while to_kwargs() builds a handler's defaults: a handler that reads options from the
# environment reads none then, so values that came from variables count as changes.
_DEFAULTS_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("drivetrain_handler_defaults", default=False)


def _environment() -> dict[str, str] | None:
    """The variables a handler reads its unset options from (``None``: the process's)."""
    return {} if _DEFAULTS_ONLY.get() else None


class KwargsHandler:
    """Base of every handler: ``to_kwargs()`` gives the values changed from the defaults (the
    values of a handler built with no arguments and no environment variables)."""

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.__dict__)

    def to_kwargs(self) -> dict[str, Any]:
        token = _DEFAULTS_ONLY.set(True)
        try:
            default = type(self)().to_dict()
        finally:
            _DEFAULTS_ONLY.reset(token)
        return {key: value for key, value in self.to_dict().items() if default.get(key) != value}


@dataclass
class AutocastKwargs(KwargsHandler):
    """Options of ``torch.autocast`` in mixed-precision forward passes."""

    enabled: bool = True
    cache_enabled: bool | None = None


@dataclass
class GradScalerKwargs(KwargsHandler):
    """Options of the fp16 gradient scaler (``torch.amp.GradScaler``)."""

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Options of the process group: ``backend``, ``init_method`` and ``timeout``.

    ``backend=None`` (the default) means the backend the run's platform declares for its
    devices, and ``timeout=None`` the communication plugin's default. This differs from
    Accelerate on purpose: Accelerate defaults ``backend`` to its GPU library's name, which
    the core cannot assume (the platform is a plugin); pass a name to force one.
    """

    backend: str | None = None
    init_method: str | None = None
    timeout: timedelta | None = None

    def to_kwargs(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass
class ProfileKwargs(KwargsHandler):
    """Options of ``accelerator.profile()`` (``torch.profiler``)."""

    activities: list[str] | None = None
    schedule_option: dict[str, int] | None = None
    on_trace_ready: Any = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: str | None = None


#: What ``MonitorKwargs(on_spike=...)`` may do with a loss spike.
SPIKE_ACTIONS = ("warn", "skip", "stop")


@dataclass
class MonitorKwargs(KwargsHandler):
    """Measure every optimizer step of the run and guard it against loss spikes (off unless given).

    With this handler the prepared data loaders, optimizers and models are watched: step time
    and its parts, samples/s and tokens/s, model FLOPs and MFU, peak memory, logged every
    ``log_every`` steps through ``accelerator.log`` and summarised at ``end_training()``. See
    the monitoring guide for what each number means.

    Args:
        log_every: optimizer steps per logged window.
        peak_flops: the device's peak FLOP/s for MFU; ``None`` asks the platform (known for
            common GPUs; none on the CPU, so no MFU there unless given).
        on_spike: the loss-spike guard: ``"warn"`` reports a spike, ``"skip"`` also skips its
            optimizer step (no parameter change, gradients dropped), ``"stop"`` saves the last
            good state and raises ``LossSpikeError``; ``None`` (the default) reads no loss.
        spike_factor: a loss above this times the running median is a spike (non-finite always is).
        spike_window: how many recent losses the running median covers.
        checkpoint_dir: where ``on_spike="stop"`` saves; ``None``: ``save_state()``'s automatic naming.
    """

    log_every: int = 50
    peak_flops: float | None = None
    on_spike: str | None = None
    spike_factor: float = 3.0
    spike_window: int = 50
    checkpoint_dir: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.log_every, bool) or not isinstance(self.log_every, int) or self.log_every < 1:
            raise ConfigError(f"MonitorKwargs(log_every={self.log_every!r}) must be a whole number of steps, 1 or more")
        if self.peak_flops is not None and not (isinstance(self.peak_flops, numbers.Real) and self.peak_flops > 0):
            raise ConfigError(f"MonitorKwargs(peak_flops={self.peak_flops!r}) must be the device's peak FLOP/s, "
                              "a number above 0 (e.g. 989e12), or None to ask the platform")
        if self.on_spike is not None and self.on_spike not in SPIKE_ACTIONS:
            raise ConfigError(f"MonitorKwargs(on_spike={self.on_spike!r}) is not an action; use one of "
                              f"{', '.join(repr(a) for a in SPIKE_ACTIONS)}, or None to leave losses unread")
        if not (isinstance(self.spike_factor, numbers.Real) and self.spike_factor > 1):
            raise ConfigError(f"MonitorKwargs(spike_factor={self.spike_factor!r}) must be a number above 1 "
                              "(a spike is a loss above spike_factor times the running median)")
        if isinstance(self.spike_window, bool) or not isinstance(self.spike_window, int) or self.spike_window < 2:
            raise ConfigError(f"MonitorKwargs(spike_window={self.spike_window!r}) must be a whole number of "
                              "losses, 2 or more")


@dataclass
class GradientAccumulationPlugin(KwargsHandler):
    """How gradient accumulation behaves (Accelerate's ``GradientAccumulationPlugin``).

    ``num_steps=None`` (Accelerate's default) accumulates over one step, as ``1`` does.
    ``to_kwargs()`` holds the fields set away from their defaults, as Accelerate's: the
    gradient state's ``plugin_kwargs`` (which transformers reads) is that dict.
    """

    num_steps: int | None = None
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False


@dataclass
class DataLoaderConfiguration:
    """How prepared data loaders shard and place batches."""

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False


#: The signals ``ProjectConfiguration(preemption_signals=...)`` may name: those schedulers and
#: cloud machines send before they end a job, and that Python can catch.
PREEMPTION_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGUSR2", "SIGINT", "SIGHUP", "SIGQUIT", "SIGXCPU")


def preemption_signal_names(value: Any) -> tuple[str, ...]:
    """``value`` (signal names, with or without ``SIG``, or ``signal.Signals``) as a tuple of
    names from :data:`PREEMPTION_SIGNALS`; anything else is a ConfigError naming those."""
    items = [value] if isinstance(value, (str, int)) else list(value) if value is not None else []
    names = []
    for item in items:
        name = getattr(item, "name", item)
        name = str(name).strip().upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        if name not in PREEMPTION_SIGNALS:
            raise ConfigError(f"ProjectConfiguration(preemption_signals=...) names {item!r}, not a signal a run can "
                              f"save on; choose among {', '.join(PREEMPTION_SIGNALS)}")
        if name not in names:
            names.append(name)
    if not names:
        raise ConfigError("ProjectConfiguration(preemption_signals=...) names no signal; give at least one of "
                          f"{', '.join(PREEMPTION_SIGNALS)}")
    return tuple(names)


@dataclass
class ProjectConfiguration:
    """Where a project writes checkpoints and logs, and how checkpoints are named and rotated.

    ``save_on_preemption=True``: on one of ``preemption_signals`` (SIGTERM and SIGUSR1 by
    default) the run finishes the optimizer step the processes agree on, saves a checkpoint
    as ``save_state()`` does and exits with code 75 (``PREEMPTED_EXIT_CODE``; see the
    fault-tolerance guide).
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False
    # Keyword arguments for the fsspec file system of a checkpoint URL (``project_dir`` or a
    # ``save_state``/``load_state`` URL): ``endpoint_url``, ``key``, ``secret``, ... Unset, the
    # store's library reads its credentials the usual way (``AWS_*`` variables, ``~/.aws``).
    storage_options: dict[str, Any] | None = None
    save_on_preemption: bool = False
    preemption_signals: tuple[str, ...] = ("SIGTERM", "SIGUSR1")

    def set_directories(self, project_dir: str | None = None) -> None:
        self.project_dir = project_dir
        if self.logging_dir is None:
            self.logging_dir = project_dir

    def __post_init__(self) -> None:
        self.set_directories(self.project_dir)

    def __setattr__(self, name: str, value: Any) -> None:
        # Checked on every assignment, so a limit set later is refused as one given at construction.
        if name == "total_limit" and value is not None and (not _is_count(value) or value < 1):
            raise ConfigError(f"ProjectConfiguration(total_limit={value!r}) would keep no checkpoint: pass a number "
                              "of checkpoints to keep, 1 or more, or None to keep all")
        if name == "iteration" and (not _is_count(value) or value < 0):
            raise ConfigError(f"ProjectConfiguration(iteration={value!r}) cannot name a checkpoint (checkpoint_<N> "
                              "counts from 0): pass 0 or more, e.g. the number after the newest checkpoint_<N>")
        if name == "save_on_preemption" and not isinstance(value, bool):
            raise ConfigError(f"ProjectConfiguration(save_on_preemption={value!r}) must be True or False")
        if name == "preemption_signals":
            value = preemption_signal_names(value)
        super().__setattr__(name, value)


def _is_count(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass
class TorchDynamoPlugin(KwargsHandler):
    """``torch.compile`` options for the prepared model.

    An option left at ``None`` is read from the environment as ``drivetrain launch`` (or
    ``accelerate launch``) sets it: ``DRIVETRAIN_DYNAMO_BACKEND`` (default ``"no"``),
    ``_MODE`` (``"default"``), ``_USE_FULLGRAPH``, ``_USE_DYNAMIC`` (unset: torch decides)
    and ``_USE_REGIONAL_COMPILATION``, each also read under its ``ACCELERATE_`` name.
    """

    backend: str | None = None
    mode: str | None = None
    fullgraph: bool | None = None
    dynamic: bool | None = None
    options: dict[str, Any] | None = None
    disable: bool = False
    use_regional_compilation: bool | None = None

    def __post_init__(self) -> None:
        from ..kernel import environment

        env = _environment()
        if self.backend is None:
            self.backend = environment.read("DYNAMO_BACKEND", default="no", env=env)
        self.backend = str(getattr(self.backend, "value", self.backend)).lower()
        if self.mode is None:
            self.mode = environment.read_checked("DYNAMO_MODE", default="default", env=env)
        elif str(self.mode) not in environment.DYNAMO_MODES:
            raise ConfigError(f"TorchDynamoPlugin(mode={self.mode!r}) is not a torch.compile mode; use one of "
                              f"{', '.join(environment.DYNAMO_MODES)}")
        if self.fullgraph is None:
            self.fullgraph = environment.read_bool("DYNAMO_USE_FULLGRAPH", default=False, env=env)
        if self.use_regional_compilation is None:
            self.use_regional_compilation = environment.read_bool("DYNAMO_USE_REGIONAL_COMPILATION", default=False,
                                                                  env=env)
        if self.dynamic is None and environment.read("DYNAMO_USE_DYNAMIC", env=env) is not None:
            self.dynamic = environment.read_bool("DYNAMO_USE_DYNAMIC", env=env)

    def compile_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``torch.compile`` besides ``backend`` that these options set."""
        kwargs: dict[str, Any] = {"fullgraph": self.fullgraph}
        if self.mode and self.mode != "default":
            kwargs["mode"] = self.mode
        if self.dynamic is not None:
            kwargs["dynamic"] = self.dynamic
        if self.options:
            kwargs["options"] = self.options
        return kwargs


__all__ = [
    "KwargsHandler", "AutocastKwargs", "GradScalerKwargs", "InitProcessGroupKwargs", "MonitorKwargs", "ProfileKwargs",
    "GradientAccumulationPlugin", "DataLoaderConfiguration", "ProjectConfiguration", "TorchDynamoPlugin",
]
