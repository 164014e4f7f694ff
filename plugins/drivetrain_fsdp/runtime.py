"""What the fsdp plugin keeps for one run: its resolved options and the models it wrapped."""

from __future__ import annotations

import weakref
from typing import Any

from drivetrain.plugin_api import ConfigError

from .options import FullyShardedDataParallelPlugin

NAME = "fsdp"
OPTIONS_ARGUMENT = "fsdp_plugin"


class Runtime:
    """The fsdp state of one run.

    Attributes:
        options: the resolved :class:`FullyShardedDataParallelPlugin`.
        models: the models this run wrapped, in order (weak references).
        optimizers: the optimizers this run prepared, in order (weak references).
        replaced: original parameter -> what replaced it when its model was sharded, for
            optimizers created before ``prepare`` (weak: dropped with the old parameters).
        checked: what ``load_state``'s check read for each model, by (directory, index),
            taken by the model's load (a full state dict; ``None`` for a sharded one).
    """

    def __init__(self, run: Any, options: FullyShardedDataParallelPlugin) -> None:
        from torch.utils.weak import WeakIdKeyDictionary

        self._run = weakref.ref(run)
        self.options = options
        self._models: list[weakref.ref] = []
        self._optimizers: list[weakref.ref] = []
        self.replaced: Any = WeakIdKeyDictionary()
        self.meshes: dict[tuple[int, ...], Any] = {}
        self.checked: dict[tuple[str, int], Any] = {}
        self.extension = Extension(self)

    @property
    def models(self) -> list[Any]:
        return [model for model in (ref() for ref in self._models) if model is not None]

    def add_model(self, model: Any) -> None:
        self._models.append(weakref.ref(model))

    @property
    def optimizers(self) -> list[Any]:
        """The optimizers prepared in this run, in order: the ``index`` of each in a checkpoint."""
        return [optimizer for optimizer in (ref() for ref in self._optimizers) if optimizer is not None]

    def add_optimizer(self, optimizer: Any) -> None:
        if not any(ref() is optimizer for ref in self._optimizers):
            self._optimizers.append(weakref.ref(optimizer))

    def active(self) -> bool:
        """Whether the run still uses FSDP (a later ``Accelerator`` may have chosen another strategy)."""
        return strategy_chosen(self._run(), NAME)


def strategy_chosen(run: Any, name: str) -> bool:
    """Whether ``run`` (``None`` once it is gone) still has the strategy ``name`` as its choice."""
    strategy = run.selection.strategy if run is not None else None
    return strategy is not None and strategy.name == name


class Extension:
    """What the run exposes on ``AcceleratorState`` and the ``Accelerator`` (Accelerate's names)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = weakref.ref(runtime)

    @property
    def fsdp_plugin(self) -> FullyShardedDataParallelPlugin:
        runtime = self._runtime()
        if runtime is None or not runtime.active():
            raise AttributeError("fsdp_plugin")
        return runtime.options

    @property
    def is_fsdp2(self) -> bool:
        runtime = self._runtime()
        return runtime is not None and runtime.active() and runtime.options.fsdp_version == 2

    @property
    def is_xla_gradients_synced(self) -> bool:
        """Accelerate's ``GradientState`` flag: FSDP always synchronises gradients itself."""
        runtime = self._runtime()
        if runtime is None or not runtime.active():
            raise AttributeError("is_xla_gradients_synced")
        return True


_RUNTIMES: "weakref.WeakKeyDictionary[Any, Runtime]" = weakref.WeakKeyDictionary()


def configure(run: Any) -> Runtime:
    """Resolve this run's options, check them against the run, and file them (once per
    ``Accelerator``; a later one may bring other options)."""
    options = run.options.get(OPTIONS_ARGUMENT)
    if options is None:
        options = FullyShardedDataParallelPlugin()
    elif not isinstance(options, FullyShardedDataParallelPlugin):
        raise ConfigError(f"fsdp_plugin must be a FullyShardedDataParallelPlugin, not {type(options).__name__}")
    precision = run.selection.mixed_precision
    if precision in ("fp16", "bf16"):
        options.set_mixed_precision(precision)
    elif precision not in ("no", "fp8"):  # fp8 layers (converted before sharding) cast their own matmuls
        raise ConfigError(f"mixed precision {precision!r} is not supported with FSDP; use bf16 or fp16, or "
                          "give FullyShardedDataParallelPlugin(mixed_precision_policy=...)")
    if options.offloads_parameters and run.platform.device_type == "cpu":
        raise ConfigError(
            "FSDP CPU offload (cpu_offload / fsdp_offload_params) moves parameters from an accelerator to CPU memory, "
            f"but this run's platform is {run.platform.name!r}, where they are in CPU memory already (torch's "
            "offloading also needs an accelerator to exist); remove the option, or run on an accelerator")
    if options.fsdp_version == 2:
        import torch.distributed.fsdp as fsdp

        if not hasattr(fsdp, "fully_shard"):
            import torch

            raise ConfigError(f"fsdp_version 2 needs torch.distributed.fsdp.fully_shard (torch 2.6 or newer; this is "
                              f"torch {torch.__version__}); upgrade torch or set fsdp_version to 1")
    run.options[OPTIONS_ARGUMENT] = options
    runtime = _RUNTIMES.get(run)
    if runtime is None:
        runtime = _RUNTIMES[run] = Runtime(run, options)
    runtime.options = options
    runtime._optimizers = []  # a new Accelerator: its optimizers are numbered from 0 in its checkpoints
    return runtime


def configure_extension(run: Any) -> Extension:
    return configure(run).extension


def configured_runtime(run: Any) -> Runtime | None:
    """The run's fsdp state if something configured it, without configuring it (a hook every
    active plugin gets, in a run of another strategy)."""
    return _RUNTIMES.get(run)


def runtime_of(run: Any) -> Runtime:
    """The run's fsdp state (configured on first use when no ``Accelerator`` did it)."""
    runtime = _RUNTIMES.get(run)
    return runtime if runtime is not None else configure(run)
