"""The ``deepspeed`` strategy: one object per run that holds the run's DeepSpeed state, offers
Accelerate's DeepSpeed attributes, and implements the strategy's run hooks.

The plugin also offers a launcher and a cluster environment, so its module is active in runs
that use another strategy (a job started by DeepSpeed's launcher running DDP); keeping the
strategy's hooks on this role object (``StrategySpec(hooks=...)``) means none of them has to
check which strategy the run chose. The strategy owns the run's precision: the engine applies
fp16 and bf16 from its config (:class:`EnginePrecision`). Cheap to import: the engine is
imported by each hook.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Mapping, Sequence

from drivetrain.plugin_api import ConfigError, DrivetrainError, Precision, Strategy, hookimpl

from .options import DeepSpeedPlugin, SelectionError

logger = logging.getLogger(__name__)


class EnginePrecision(Precision):
    """The run's precision as DeepSpeed's engine runs it: the engine casts the model and scales
    the loss from its config (``fp16``/``bf16``), so there is no autocast, no grad scaler and no
    ``forward`` of our own. A precision that converts layers (fp8) still converts them first."""

    #: The precisions the engine applies from its config; others convert the model themselves.
    ENGINE_PRECISIONS = ("fp16", "bf16")

    def __init__(self, chosen: Precision) -> None:
        super().__init__(chosen.run, chosen.spec)
        self.chosen = chosen

    def convert_model(self, model: Any) -> Any:
        return model if self.name in self.ENGINE_PRECISIONS else self.chosen.convert_model(model)

    def finalize_model(self, model: Any) -> Any:
        return model if self.name in self.ENGINE_PRECISIONS else self.chosen.finalize_model(model)


class DeepSpeedStrategy(Strategy):
    """DeepSpeed's engine as the run's strategy: it prepares all objects of a ``prepare`` call
    at once, steps inside ``backward``, and saves engine checkpoints.

    Attributes:
        plugins: every ``DeepSpeedPlugin`` of the current ``AcceleratorState``, by name.
        active: the name of the one the next ``prepare`` uses.
        engines: the engines this run built (weak references).
        sequence_mesh: a ``SequenceParallelMesh`` when sequences are split, else ``None``.
        checked: what ``load_state``'s check read for each engine's load, by engine.
    """

    #: What ``AcceleratorState`` and the ``Accelerator`` offer of this object (Accelerate's names).
    exposes = ("deepspeed_plugin", "deepspeed_plugins", "select_deepspeed_plugin", "get_deepspeed_plugin",
               "torch_device_mesh", "device_mesh", "parallelism_config")

    #: The engine counts the accumulation window (its config's gradient_accumulation_steps).
    accumulates_gradients = True

    def __init__(self, run: Any, arguments: Any = None) -> None:
        super().__init__(run, arguments)
        self.plugins: dict[str, DeepSpeedPlugin] = {}
        self.active: str | None = None
        self.engines: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self.sequence_mesh: Any = None
        self.checked: "weakref.WeakKeyDictionary[Any, tuple[str, int, Any, Any]]" = weakref.WeakKeyDictionary()
        self._given: tuple[Any, Any] = (None, None)  # the deepspeed_plugin(s) arguments last seen
        self._warned_clip = False

    # ------------------------------------------------------------ Accelerate's attributes

    @property
    def deepspeed_plugin(self) -> DeepSpeedPlugin:
        """The active ``DeepSpeedPlugin`` (``select_deepspeed_plugin`` changes it)."""
        if self.active is None:
            raise ConfigError("no DeepSpeedPlugin is selected")
        return self.plugins[self.active]

    @property
    def deepspeed_plugins(self) -> dict[str, DeepSpeedPlugin]:
        """Every ``DeepSpeedPlugin`` of the run, by name (``{"default": ...}`` for one)."""
        return self.plugins

    def select_deepspeed_plugin(self, name: str | None = None) -> None:
        """Make the ``DeepSpeedPlugin`` called ``name`` the one the next ``prepare`` uses."""
        if name is None:
            name = next(iter(self.plugins))
        chosen = self.get_deepspeed_plugin(name)
        for plugin in self.plugins.values():
            if plugin is not chosen:
                plugin._unselect()
        chosen.select(_from_accelerator_state=True)
        self.active = name

    def get_deepspeed_plugin(self, name: str) -> DeepSpeedPlugin:
        """The ``DeepSpeedPlugin`` called ``name``."""
        if name not in self.plugins:
            raise ValueError(f"no DeepSpeedPlugin named {name!r}; the run has {', '.join(map(repr, self.plugins))}")
        return self.plugins[name]

    # With sequence parallelism (sp_size > 1) only: otherwise the core's defaults answer.

    def _sequence_mesh(self, name: str) -> Any:
        if self.sequence_mesh is None:
            raise AttributeError(name)
        return self.sequence_mesh

    @property
    def torch_device_mesh(self) -> Any:
        """The ``DeviceMesh`` (``dp_replicate``, ``dp_shard``, ``sp``; flattened ``dp``) whose
        ``["sp"]`` group is this process's DeepSpeed sequence-parallel group."""
        return self._sequence_mesh("torch_device_mesh").mesh

    @property
    def device_mesh(self) -> Any:
        return self._sequence_mesh("device_mesh").mesh

    @property
    def parallelism_config(self) -> Any:
        return self._sequence_mesh("parallelism_config").layout.config

    # ------------------------------------------------------------ the run's options

    @hookimpl
    def drivetrain_configure_run(self, run, accelerator):
        # The arguments keep every Accelerator's of this run (one AcceleratorState): only those
        # that changed are new.
        single, several = self.arguments.get("deepspeed_plugin"), self.arguments.get("deepspeed_plugins")
        seen_single, seen_several = self._given
        new_single = single is not None and single is not seen_single
        new_several = several is not None and several is not seen_several
        self._given = (single, several)
        if new_single and new_several and not (
                isinstance(single, DeepSpeedPlugin) and any(single is p for p in _plugins_of(several).values())):
            raise ConfigError("pass deepspeed_plugin or deepspeed_plugins to the Accelerator, not both")
        if (new_several or new_single) and self.plugins and not _same_plugins(self.plugins,
                                                                              several if new_several else single):
            # Accelerate's rule: the state's plugins are fixed by the first Accelerator
            raise SelectionError("a later Accelerator cannot bring other DeepSpeed plugins: give the first "
                                 "Accelerator every plugin (deepspeed_plugin={name: plugin, ...}) and switch with "
                                 "accelerator.state.select_deepspeed_plugin(name)")
        first = not self.plugins
        if new_several or new_single:
            self.plugins = _plugins_of(several if new_several else single)
        if not self.plugins:
            self.plugins = {"default": DeepSpeedPlugin()}  # options from the environment
        precision = run.selection.mixed_precision
        for plugin in self.plugins.values():
            plugin.set_mixed_precision(precision)
        if first or new_several or new_single:
            # after the precision is filled in: selecting hands transformers a copy of the config
            self.select_deepspeed_plugin(next(iter(self.plugins)))
        steps = self.deepspeed_plugin.gradient_accumulation_steps
        if isinstance(steps, int) and steps != accelerator.gradient_accumulation_steps:
            if accelerator.gradient_accumulation_steps != 1:
                logger.warning("the DeepSpeed config's gradient_accumulation_steps (%d) replaces the Accelerator's "
                               "(%d)", steps, accelerator.gradient_accumulation_steps)
            accelerator.gradient_accumulation_steps = steps
        self._build_sequence_mesh(run, accelerator)
        return self

    def _build_sequence_mesh(self, run: Any, accelerator: Any) -> None:
        # Built with the Accelerator, where every process passes: making its groups is collective.
        from .sequence_parallel import build_device_mesh, layout_of

        layout = layout_of(run)
        if layout is None:
            self.sequence_mesh = None
            return
        built = self.sequence_mesh
        sizes = (layout.dp_replicate_size, layout.dp_shard_size, layout.sp_size)
        if built is not None and sizes == (built.layout.dp_replicate_size, built.layout.dp_shard_size,
                                           built.layout.sp_size):
            # a later Accelerator of the run: the same groups, under its own config
            built.layout = layout
            if layout.config is not None and hasattr(layout.config, "device_mesh"):
                layout.config.device_mesh = built.mesh
            return
        from .engine import ensure_process_group

        ensure_process_group(run)
        self.sequence_mesh = build_device_mesh(layout, accelerator.device.type)

    @hookimpl
    def drivetrain_adopt_precision(self, run, precision, recipe):
        # MS-AMP runs inside DeepSpeed's engine (msamp.deepspeed.initialize) with this plugin's options.
        if precision.backend != "msamp":
            return None
        plugin = self.deepspeed_plugin
        plugin.enable_msamp, plugin.msamp_opt_level = True, recipe.opt_level
        return True

    # ------------------------------------------------------------ engines

    def engine_of_parameters(self, parameters: Sequence[Any]) -> Any:
        """The engine of this run whose module holds ``parameters``, or ``None``."""
        if not parameters:
            return None
        first = parameters[0]
        for engine in list(self.engines):
            if any(p is first for p in engine.module.parameters()):
                return engine
        return None

    def plugin_of(self, engine: Any) -> DeepSpeedPlugin:
        """The ``DeepSpeedPlugin`` ``engine`` was built with."""
        return getattr(engine, "_drivetrain_plugin", None) or self.deepspeed_plugin

    # ------------------------------------------------------------ the step

    @hookimpl
    def drivetrain_prepare_objects(self, objects, run, device_placement, accelerator):
        from .engine import prepare_engine

        return prepare_engine(self, run, objects, accelerator)

    @hookimpl
    def drivetrain_wrap_model(self, model, run, evaluation_mode):
        raise ConfigError("with DeepSpeed, models are prepared by accelerator.prepare(model, optimizer, ...), which "
                          "builds the engine; prepare_model() alone cannot")

    @hookimpl(tryfirst=True)
    def drivetrain_wrap_optimizer(self, optimizer, run):
        raise ConfigError("with DeepSpeed, pass the optimizer to accelerator.prepare() together with its model")

    @hookimpl(tryfirst=True)
    def drivetrain_wrap_scheduler(self, scheduler, optimizers, run):
        raise ConfigError("with DeepSpeed, pass the scheduler to accelerator.prepare() together with its model and "
                          "optimizer")

    def own_precision(self, precision: Precision) -> Precision:
        # The engine runs the model in the config's precision and scales fp16 losses itself:
        # autocast or a grad scaler of the run's own on top would change it.
        return EnginePrecision(precision)

    def make_grad_scaler(self, kwargs: Any) -> None:
        return None  # the engine scales fp16 losses

    def backward(self, loss: Any, kwargs: Any, models: Sequence[Any]) -> None:
        from .engine import backward

        if not backward(models, loss, kwargs):
            super().backward(loss, kwargs, models)  # no engine among the models: plain backward (no scaler)

    def clip_grad_norm(self, parameters: Any, max_norm: float, norm_type: float) -> Any:
        from .engine import clip_grad_norm

        return clip_grad_norm(self, list(parameters), max_norm)

    def clip_grad_value(self, parameters: Any, clip_value: float) -> bool:
        # The engine stepped (and cleared the gradients) inside accelerator.backward, as in Accelerate.
        raise DrivetrainError("DeepSpeed cannot clip gradients by value: its engine steps inside "
                              "accelerator.backward; use accelerator.clip_grad_norm_ (gradient_clipping in the "
                              "DeepSpeed config) instead")

    @hookimpl
    def drivetrain_compile_model(self, model, run, options):
        from .engine import compile_engine, is_engine

        return compile_engine(model, options) if is_engine(model) else None

    # ------------------------------------------------------------ checkpoints

    @hookimpl
    def drivetrain_get_state_dict(self, model, run, unwrap):
        from .engine import full_state_dict, is_engine, is_zero3

        if not (is_engine(model) and is_zero3(model)):
            return None
        state = full_state_dict(model, run, self.plugin_of(model))
        return state if unwrap else {f"module.{key}": value for key, value in state.items()}

    @hookimpl
    def drivetrain_save_model_state(self, model, index, directory, run, safe_serialization, options, deferred):
        from .checkpoint import save_engine

        return save_engine(model, index, directory, run, options, deferred)

    @hookimpl
    def drivetrain_check_checkpoint(self, models, directory, run, manifest, options):
        from .checkpoint import check_engines

        check_engines(self.checked, models, directory, run, manifest, options)

    @hookimpl
    def drivetrain_load_model_state(self, model, index, directory, run, manifest, options):
        from .checkpoint import load_engine

        return load_engine(self.checked, model, index, directory, run, manifest, options)

    @hookimpl
    def drivetrain_save_optimizer_state(self, optimizer, index, directory, run):
        from .engine import DeepSpeedOptimizerWrapper

        # Saved with its engine (deepspeed_model_<i>/): nothing more to write.
        return [] if isinstance(optimizer, DeepSpeedOptimizerWrapper) else None

    @hookimpl
    def drivetrain_load_optimizer_state(self, optimizer, index, directory, run, manifest):
        from .engine import DeepSpeedOptimizerWrapper

        return True if isinstance(optimizer, DeepSpeedOptimizerWrapper) else None


def _plugins_of(given: Any) -> dict[str, DeepSpeedPlugin]:
    if isinstance(given, DeepSpeedPlugin):
        return {"default": given}
    if isinstance(given, Mapping):
        if not given:
            raise ConfigError("deepspeed_plugins is empty; give {name: DeepSpeedPlugin(...)}")
        for name, plugin in given.items():
            if not isinstance(name, str) or not isinstance(plugin, DeepSpeedPlugin):
                raise ConfigError(f"deepspeed_plugins must map names to DeepSpeedPlugin objects; got "
                                  f"{name!r}: {type(plugin).__name__}")
        return dict(given)
    raise ConfigError(f"deepspeed_plugin must be a DeepSpeedPlugin (or a dict of them), not {type(given).__name__}")


def _same_plugins(current: Mapping[str, DeepSpeedPlugin], given: Any) -> bool:
    """Whether a later Accelerator's new argument names plugins the state already has."""
    if isinstance(given, DeepSpeedPlugin):
        return any(given is plugin for plugin in current.values())
    if isinstance(given, Mapping):
        return all(current.get(name) is plugin for name, plugin in given.items())
    return False
