"""The ``fsdp`` strategy: one object per run (``run.strategy``, ``StrategySpec(hooks=...)``)
that holds the run's FSDP state, offers Accelerate's FSDP attributes, does the step's FSDP
parts (sharded grad scaler, ``no_sync``, clipping) and implements the strategy's run hooks.

Cheap to import (no torch): each hook imports what it needs when called.
"""

from __future__ import annotations

import weakref
from typing import Any, ContextManager

from drivetrain.plugin_api import ConfigError, DrivetrainError, Strategy, hookimpl

from .options import FullyShardedDataParallelPlugin

NAME = "fsdp"
OPTIONS_ARGUMENT = "fsdp_plugin"


class FSDPStrategy(Strategy):
    """Fully Sharded Data Parallel as the run's strategy.

    Attributes:
        options: the resolved :class:`FullyShardedDataParallelPlugin` (``None`` until configured).
        models: the models this run wrapped, in order (weak references).
        optimizers: the optimizers the current ``Accelerator`` prepared, in order (weak references).
        replaced: original parameter -> what replaced it when its model was sharded, for
            optimizers created before ``prepare`` (weak: dropped with the old parameters).
        meshes: the device meshes built for this run, by shape.
        checked: what ``load_state``'s check read for each model, by (directory, index),
            taken by the model's load (a full state dict; ``None`` for a sharded one).
        checkpoint_groups: gloo process groups for non-blocking sharded saves, one per saved
            object (``model_0``, ``optimizer_0``): DCP's writes and their collectives run
            beside training, each save on a thread of its own. Made at the first such save.
    """

    #: What ``AcceleratorState``, ``GradientState`` and the ``Accelerator`` offer of this object.
    exposes: tuple[str, ...] = ("fsdp_plugin", "is_fsdp2", "is_xla_gradients_synced")

    def __init__(self, run: Any, arguments: Any = None) -> None:
        super().__init__(run, arguments)
        self.options: FullyShardedDataParallelPlugin | None = None
        self._models: list[weakref.ref] = []
        self._optimizers: list[weakref.ref] = []
        self.replaced: Any = None
        self.meshes: dict[tuple[int, ...], Any] = {}
        self.checked: dict[tuple[str, int], Any] = {}
        self.checkpoint_groups: dict[str, Any] = {}

    # ------------------------------------------------------------ Accelerate's attributes

    @property
    def fsdp_plugin(self) -> FullyShardedDataParallelPlugin:
        if self.options is None:
            raise AttributeError("fsdp_plugin")
        return self.options

    @property
    def is_fsdp2(self) -> bool:
        return self.options is not None and self.options.fsdp_version == 2

    @property
    def is_xla_gradients_synced(self) -> bool:
        """Accelerate's ``GradientState`` flag: FSDP always synchronises gradients itself."""
        return True

    # ------------------------------------------------------------ the run's state

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

    def configure(self, run: Any) -> None:
        """Resolve this run's options and check them against the run (once per ``Accelerator``;
        a later one may bring other options)."""
        options = self.arguments.get(OPTIONS_ARGUMENT)
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
                "FSDP CPU offload (cpu_offload / fsdp_offload_params) moves parameters from an accelerator to CPU "
                f"memory, but this run's platform is {run.platform.name!r}, where they are in CPU memory already "
                "(torch's offloading also needs an accelerator to exist); remove the option, or run on an "
                "accelerator")
        if options.fsdp_version == 2:
            import torch.distributed.fsdp as fsdp

            if not hasattr(fsdp, "fully_shard"):
                import torch

                raise ConfigError(f"fsdp_version 2 needs torch.distributed.fsdp.fully_shard (torch 2.6 or newer; "
                                  f"this is torch {torch.__version__}); upgrade torch or set fsdp_version to 1")
        self.arguments[OPTIONS_ARGUMENT] = options  # resolved once: a later Accelerator keeps it unless it brings its own
        if self.replaced is None:
            from torch.utils.weak import WeakIdKeyDictionary

            self.replaced = WeakIdKeyDictionary()
        self.options = options
        self._optimizers = []  # a new Accelerator: its optimizers are numbered from 0 in its checkpoints

    def configure_unprepared(self, run: Any) -> None:
        """Configure a run no ``Accelerator`` configured (a hook reached before one was built)."""
        self.configure(run)

    # ------------------------------------------------------------ the run hooks

    @hookimpl
    def drivetrain_configure_run(self, run):
        self.configure(run)
        return self  # exposes `state.fsdp_plugin` and `accelerator.is_fsdp2`

    @hookimpl
    def drivetrain_wrap_model(self, model, run, evaluation_mode):
        from .wrap import wrap_model

        return wrap_model(model, run)

    @hookimpl
    def drivetrain_unwrap_model(self, model, run, keep_fp32_wrapper):
        from .wrap import unwrap

        return unwrap(model)

    @hookimpl(tryfirst=True)
    def drivetrain_wrap_optimizer(self, optimizer, run):
        from .wrap import point_optimizer_at_sharded_parameters

        point_optimizer_at_sharded_parameters(optimizer, run)
        self.add_optimizer(optimizer)  # a checkpoint load checks every optimizer before changing any
        return None  # the default wrapper suits FSDP

    # ------------------------------------------------------------ the step

    def make_grad_scaler(self, kwargs: Any) -> Any:
        if self.run.precision.name != "fp16":
            return super().make_grad_scaler(kwargs)
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        # Finds inf/nan in every process's shard and agrees across processes on skipping a step.
        return ShardedGradScaler(self.run.platform.device_type, **kwargs)

    def no_sync(self, model: Any) -> ContextManager[Any]:
        from .wrap import no_sync

        context = no_sync(model)
        return super().no_sync(model) if context is None else context

    def sync_in_backward(self, model: Any) -> ContextManager[Any]:
        from .wrap import sync_in_backward

        context = sync_in_backward(model)
        return super().sync_in_backward(model) if context is None else context

    def clip_grad_norm(self, parameters: Any, max_norm: float, norm_type: float) -> Any:
        from .wrap import clip_grad_norm

        return clip_grad_norm(parameters, max_norm, norm_type, self.run)

    def clip_grad_value(self, parameters: Any, clip_value: float) -> bool:
        # As in Accelerate: clipping by value is refused with sharded gradients; the norm is global.
        raise DrivetrainError("FSDP cannot clip gradients by value; use accelerator.clip_grad_norm_ instead")

    # ------------------------------------------------------------ checkpoints

    @hookimpl
    def drivetrain_get_state_dict(self, model, run, unwrap):
        from .checkpoint import full_model_state_dict

        return full_model_state_dict(model, run)

    @hookimpl
    def drivetrain_save_model_state(self, model, index, directory, run, safe_serialization, deferred):
        from .checkpoint import save_model

        return save_model(model, index, directory, run, safe_serialization, deferred)

    @hookimpl
    def drivetrain_check_checkpoint(self, models, optimizers, directory, run):
        from .checkpoint import check_checkpoint

        check_checkpoint(models, optimizers, directory, run)

    @hookimpl
    def drivetrain_load_model_state(self, model, index, directory, run, manifest):
        from .checkpoint import load_model

        return load_model(model, index, directory, run)

    @hookimpl
    def drivetrain_save_optimizer_state(self, optimizer, index, directory, run, deferred):
        from .checkpoint import save_optimizer

        return save_optimizer(optimizer, index, directory, run, deferred)

    @hookimpl
    def drivetrain_load_optimizer_state(self, optimizer, index, directory, run, manifest):
        from .checkpoint import load_optimizer

        return load_optimizer(optimizer, index, directory, run)
