"""The hook specifications: everything a plugin can tell or do for drivetrain.

A plugin is a module (the target of an entry point in the ``drivetrain.plugins`` group) that
declares ``PLUGIN_INFO`` and implements some of the hooks below with
``@drivetrain.plugin_api.hookimpl``. An implementation may accept fewer arguments than the
spec lists (pluggy passes only those it names); naming an argument the spec does not have,
or a hook that does not exist, gets the plugin refused with the reason.

There are two kinds of hooks.

**Registration hooks** (``drivetrain_register_*``, ``drivetrain_add_*``,
``drivetrain_public_names``, ``drivetrain_env_report``) are called once per process on every
loaded plugin, including those whose library is missing, so that drivetrain can list, explain
and refuse them. They must be cheap: return descriptors whose heavy parts are lazy references,
import nothing optional.

**Run hooks** (every hook taking ``run``) are called only on the plugins active in this run:
the chosen platform, cluster environment, strategy, precision, trackers, and the plugins
those declare. They are resolved once, when the ``Accelerator`` is built, so a training step
pays no discovery cost. ``run`` is the :class:`drivetrain.run.Run` of this process: the
process state, the names chosen for each role, the plugin-owned config sections and the
user's kwargs handlers. A strategy's or precision's run hooks may instead be methods of a
role object its descriptor names (``StrategySpec.hooks``, API 1.3): those are called only
while that item is the run's, so a plugin with several roles needs no check of the run's
choice in each hook. The object is built for each run and keeps that run's state (API 1.6);
``run.role("strategy")`` reaches it from plugin code outside a hook.

Order among active plugins follows pluggy: implementations marked ``tryfirst=True`` run
first, ``trylast=True`` last. Where a hook says *firstresult*, the first non-``None``
answer wins and the others are not called; a strategy that takes over a step (DeepSpeed's
engine runs backward itself) marks its implementation ``tryfirst``. Where a hook says
*chained*, each implementation receives the previous one's return value (``None`` keeps
the value unchanged).

The order in which the model is transformed is fixed: device placement (platform) ->
``drivetrain_convert_model`` (precision conversions such as FP8 layers) ->
``drivetrain_wrap_model`` (the parallel wrapper of the strategy) ->
``drivetrain_finalize_model`` (compilation). A strategy whose
``StrategySpec.places_models`` is true places the model itself, in ``drivetrain_wrap_model``
(a sharding strategy shards first), and the core skips its own placement. A strategy that
answers ``drivetrain_prepare_objects`` takes the place of placement and wrapping: the core
still converts the models before handing them over and finalises the models it returns, so
every transform runs whatever the strategy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ContextManager, Iterable, Sequence

from .plugin_api import hookspec

if TYPE_CHECKING:  # pragma: no cover - names for the type hints only
    import argparse

    from .plugin_api import (
        ClusterEnvironmentSpec,
        ConfigSection,
        EnvReportLine,
        LauncherSpec,
        PlatformSpec,
        PrecisionSpec,
        StrategySpec,
        TrackerSpec,
    )
    from .run import Run


# --------------------------------------------------------------------------------------
# Registration: what a plugin offers (called once per process on every loaded plugin)
# --------------------------------------------------------------------------------------


@hookspec
def drivetrain_register_platforms() -> Sequence[PlatformSpec]:
    """Describe the device platforms this plugin offers (detect environment).

    Called once per process. Return a list of :class:`~drivetrain.plugin_api.PlatformSpec`
    (empty or ``None`` for none). Each spec carries a probe that detection calls to ask
    whether the platform is usable here; nothing behind its ``factory`` is imported until it
    is chosen.
    """


@hookspec
def drivetrain_register_cluster_environments() -> Sequence[ClusterEnvironmentSpec]:
    """Describe the cluster environments this plugin recognises (detect environment).

    A cluster environment is whatever started this process and knows its rank: torchrun,
    SLURM, MPI, a Kubernetes job. Return a list of
    :class:`~drivetrain.plugin_api.ClusterEnvironmentSpec`. Probes read environment
    variables only.
    """


@hookspec
def drivetrain_register_strategies() -> Sequence[StrategySpec]:
    """Describe the distribution strategies this plugin offers (ddp, fsdp, deepspeed, ...).

    Return a list of :class:`~drivetrain.plugin_api.StrategySpec`. A strategy becomes
    active only when asked for, except the one marked ``automatic`` (DDP), which a
    multi-process run with no strategy selected uses.
    """


@hookspec
def drivetrain_register_precisions() -> Sequence[PrecisionSpec]:
    """Describe the mixed-precision modes this plugin offers (fp16, bf16, fp8, ...).

    Return a list of :class:`~drivetrain.plugin_api.PrecisionSpec`.
    """


@hookspec
def drivetrain_register_trackers() -> Sequence[TrackerSpec]:
    """Describe the experiment trackers this plugin offers.

    Return a list of :class:`~drivetrain.plugin_api.TrackerSpec`. ``log_with="all"`` uses
    every tracker of an available plugin.
    """


@hookspec
def drivetrain_register_launchers() -> Sequence[LauncherSpec]:
    """Describe the ways this plugin can start a job's processes (``drivetrain launch``).

    Return a list of :class:`~drivetrain.plugin_api.LauncherSpec`. The launcher whose
    ``applies(args)`` is true with the highest priority runs the job.
    """


@hookspec
def drivetrain_register_config_sections() -> Sequence[ConfigSection]:
    """Describe the config-file blocks this plugin owns (``fsdp_config:``, ...).

    Return a list of :class:`~drivetrain.plugin_api.ConfigSection` (``key=""`` for top-level
    keys the plugin owns). The config loader validates each block against its fields, and ``drivetrain config`` asks their questions.
    A key owned by no installed plugin is an error naming the plugin that would own it if
    one is known, or the allowed keys.
    """


@hookspec
def drivetrain_add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this plugin's options to ``drivetrain launch``.

    Args:
        parser: the launch command's parser. Add one argument group named after the plugin
            (``parser.add_argument_group("FSDP")``). Spell options with dashes; drivetrain
            accepts the underscore spelling too.

    The return value is ignored. The parsed values reach the children through
    ``drivetrain_launch_environment``.
    """


@hookspec
def drivetrain_launch_environment(args: Any) -> dict[str, str]:
    """Turn parsed launch arguments into environment variables for the children.

    Args:
        args: the parsed ``drivetrain launch`` namespace, already merged with the config
            file (command line wins).

    Return a mapping of variables to set in every child (``{"FSDP_SHARDING_STRATEGY":
    "FULL_SHARD"}``), or ``None``. All results are merged; two plugins setting one variable
    to different values is an error.
    """


@hookspec
def drivetrain_add_cli_commands(subparsers: Any) -> None:
    """Add sub-commands to the ``drivetrain`` command line (``merge-weights``, ...).

    Args:
        subparsers: the object returned by ``ArgumentParser.add_subparsers``. Each new
            parser must ``set_defaults(handler=callable)``; the callable receives the parsed
            namespace and returns an exit code.
    """


@hookspec
def drivetrain_public_names() -> dict[str, str]:
    """Contribute names that users import from ``drivetrain`` (compatibility names).

    Return a mapping from a public name to a lazy reference, for example
    ``{"DeepSpeedPlugin": "drivetrain_deepspeed.config:DeepSpeedPlugin"}``. The name is
    resolved on first access (``from drivetrain import DeepSpeedPlugin``), so the plugin's
    library is imported only when the user touches it. Two plugins contributing one name is
    reported as a conflict and the first loaded wins.

    A key may name the module it belongs to, relative to ``drivetrain``:
    ``"tracking.WandBTracker"`` is importable as ``from drivetrain.tracking import
    WandBTracker``, ``"utils.is_deepspeed_available"`` from ``drivetrain.utils``. A plain key
    belongs to ``drivetrain`` (and ``drivetrain.utils``, which offers every top-level name).
    Every submodule of ``drivetrain.utils`` serves its own keys the same way:
    ``"utils.environment.override_numa_affinity"`` is importable from
    ``drivetrain.utils.environment``; a name the module defines itself cannot be replaced.
    """


@hookspec
def drivetrain_fallback_names() -> dict[str, str]:
    """Contribute stand-ins for names whose owner may not be installed (API 1.2).

    Same form as :func:`drivetrain_public_names` (module-qualified keys allowed), with a lower
    rank: a fallback is used only when no plugin contributes the name through
    ``drivetrain_public_names``. This is how ``drivetrain.utils.is_megatron_lm_available``
    answers ``False`` where no plugin offers that backend: a compatibility plugin lists the
    availability probes a user may call, and the plugin that owns a backend contributes the
    real probe.
    """


@hookspec
def drivetrain_distributed_types() -> Sequence[str]:
    """Contribute members of the ``DistributedType`` enumeration (``"FSDP"``).

    Return the upper-case names; each becomes ``DistributedType.NAME``, equal to the string
    ``"NAME"``.
    """


@hookspec
def drivetrain_enum_members() -> dict[str, Any]:
    """Contribute members to drivetrain's open enumerations (API 1.2).

    Return ``{enum class name: members}`` where members is a list of values (the member
    name is the upper-cased value: ``["fp8"]`` gives ``PrecisionType.FP8``) or a mapping
    from member name to value (``{"COMETML": "comet_ml"}``). Members of backends that are not
    installed are still contributed (a compatibility plugin lists Accelerate's), so user code
    that compares against them runs.
    """


@hookspec
def drivetrain_env_report() -> Sequence[EnvReportLine]:
    """Contribute lines to ``drivetrain env`` (library versions, device names, ...).

    Called on every loaded plugin. Return a list of
    :class:`~drivetrain.plugin_api.EnvReportLine`. Keep it fast and never raise: a failing
    implementation is reported as a line of its own.
    """


# --------------------------------------------------------------------------------------
# Detect environment: bring this process into its distributed setup (active plugins)
# --------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def drivetrain_init_distributed(run: Run, timeout: Any, backend: str | None, init_method: str | None) -> bool:
    """Join this process to its peers (create the default process group).

    *firstresult*. Called once per process, when a run has more than one process and no
    group exists yet.

    Args:
        run: this process's run.
        timeout: ``datetime.timedelta`` after which a collective that does not complete
            fails (from ``InitProcessGroupKwargs``).
        backend: the communication backend asked for, or ``None`` for the platform's
            default.
        init_method: URL for the rendezvous, or ``None`` for environment variables.

    Return ``True`` once the group exists. A platform with its own runtime (XLA) marks its
    implementation ``tryfirst``.
    """


@hookspec(firstresult=True)
def drivetrain_collectives(run: Run) -> Any:
    """Provide the collective operations of this run (collective ops).

    *firstresult*. Called once per run. Return an object implementing
    :class:`drivetrain.collectives.Collectives` (``all_gather``, ``all_reduce``,
    ``all_gather_into``, ``broadcast``, ``barrier``, ``all_gather_object``, ``broadcast_object_list``). Every
    operation in ``drivetrain.utils`` goes through it, so a platform with its own
    communication runtime replaces all of them at once by marking its implementation
    ``tryfirst``.
    """


# --------------------------------------------------------------------------------------
# Configure the run for an Accelerator (active plugins)
# --------------------------------------------------------------------------------------


@hookspec
def drivetrain_configure_run(run: Run, accelerator: Any) -> Any:
    """Configure the run for an ``Accelerator`` that was just built.

    Called on every active plugin at the end of ``Accelerator.__init__``, once the user's
    strategy arguments are in ``run.options`` and the kwargs handlers in
    ``run.handler_kwargs``; again for each further ``Accelerator`` of the process. A strategy
    resolves and checks its options here (building its option object from environment
    variables when the user gave none), may set ``run.options["strategy_accumulates"]``
    and the accelerator's ``gradient_accumulation_steps``, and fails early on a bad
    combination.

    Args:
        run: this process's run.
        accelerator: the new ``Accelerator``.

    Return ``None``, or an object whose public attributes ``AcceleratorState``,
    ``GradientState`` and the ``Accelerator`` expose when they do not have the attribute
    themselves: Accelerate's
    attributes that belong to a backend (``state.deepspeed_plugin``,
    ``state.select_deepspeed_plugin(name)``). They are looked up on every access, so the
    object may compute them. An object with an ``exposes`` tuple offers only those names
    (API 1.6): a strategy's role object returns itself, its state and hooks staying its own.
    """


@hookspec(firstresult=True)
def drivetrain_adopt_precision(run: Run, precision: PrecisionSpec, recipe: Any) -> bool | None:
    """Offer the run's precision to a strategy whose engine can apply it itself (API 1.6).

    *firstresult*. Called by a precision's role object, from its ``drivetrain_configure_run``
    (marked ``trylast``, so the strategy has configured itself first), when the precision can
    be applied by an engine instead of by its own conversion: MS-AMP's fp8 runs inside
    DeepSpeed's engine. The strategy sets its own options from ``recipe``; a precision never
    writes another plugin's option object. A strategy that applies no precision leaves the
    hook alone.

    Args:
        run: this process's run; the asking precision is ``run.selection.precision``.
        precision: the run's chosen precision (its ``name`` and ``backend``).
        recipe: that precision's options for this run (its kwargs handler, such as
            ``MSAMPRecipeKwargs(opt_level="O2")``).

    Return ``True`` when the strategy's engine applies the precision (the precision then
    leaves the models and optimizers the engine builds alone), ``None`` when it does not (the
    precision converts them itself, as without a strategy). ``False`` is not an answer.
    """


# --------------------------------------------------------------------------------------
# Wrap model
# --------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def drivetrain_prepare_objects(
    objects: Sequence[Any], run: Run, device_placement: Sequence[bool], accelerator: Any
) -> Sequence[Any] | None:
    """Prepare all objects of one ``accelerator.prepare(...)`` call together.

    *firstresult*. Most strategies leave this alone (return ``None``) and the core prepares
    each object through the hooks below. A strategy that must see models, optimizers and
    schedulers at once answers here: an engine built from all three (DeepSpeed). It stands
    for placement and ``drivetrain_wrap_model`` only: the models it receives have already
    been through ``drivetrain_convert_model`` (where the user built them: the strategy
    places them), and each model it returns in a model's position goes through
    ``drivetrain_finalize_model`` (compilation) before the user gets it (API 1.2). A model
    whose wrapper must be compiled its own way answers ``drivetrain_compile_model``. Parameters
    that change identity when sharded (FSDP) need not: the core wraps every model of the call
    before it prepares any optimizer, so ``drivetrain_wrap_optimizer`` can point an optimizer
    created before ``prepare`` at the new parameters.

    Args:
        objects: what the user passed, in order (already flattened from lists/tuples). Data
            loaders among them are already prepared by the core (sharded across processes),
            so their batch size per process is known.
        run: this process's run.
        device_placement: for each object, whether the user wants it moved to the device.
        accelerator: the ``Accelerator`` whose ``prepare`` this is (its gradient
            accumulation steps, the data loaders it prepared earlier). Read it; the core
            records what this hook returns.

    Return the prepared objects, in the same order and number. The accelerator records
    every returned ``torch.nn.Module`` as a prepared model, every ``torch.optim.Optimizer``
    as a prepared optimizer and every learning-rate scheduler as a prepared scheduler (for
    ``backward``, ``save_state``, ...); anything else is handed back to the user as it is.
    """


@hookspec
def drivetrain_transform_objects(objects: Sequence[Any], run: Run, accelerator: Any) -> Sequence[Any] | None:
    """Rewrite the models and optimizers of one ``accelerator.prepare(...)`` call together,
    before anything else is done to them (API 1.4).

    *chained*: each implementation receives the list the previous one returned. Called at
    the start of every ``prepare``, once its data loaders are prepared, whatever the
    strategy. A library that optimises a model together with its optimizer (kernels swapped,
    master weights kept beside low-precision ones: Intel Extension for PyTorch's
    ``optimize``) answers here, so the strategy then places and wraps what it returned as it
    would the user's objects (DDP composes with it).

    Args:
        objects: what the user passed, in order (flattened); data loaders already prepared,
            models and optimizers as given (a model prepared earlier may be among them).
        run: this process's run.
        accelerator: the ``Accelerator`` whose ``prepare`` this is.

    Return a list of the same length, each replacement in the position of what it replaces,
    or ``None`` to keep the objects.
    """


@hookspec
def drivetrain_convert_model(model: Any, run: Run) -> Any:
    """Convert a model's layers or dtypes for the chosen precision, before wrapping.

    *chained*: each implementation receives the model the previous one returned. FP8
    plugins swap linear layers here; the parallel wrapper comes afterwards.

    Args:
        model: the ``torch.nn.Module``: on the run's device, unless the strategy places
            models itself (``StrategySpec.places_models``, or a strategy answering
            ``drivetrain_prepare_objects``): then where the user built it.
        run: this process's run.

    Return the converted module, or ``None`` to keep it. A strategy whose engine runs the
    model in its own precision answers ``drivetrain_autocast`` first; a precision plugin
    that wraps ``forward`` in autocast checks that answer and leaves such a model alone.
    """


@hookspec(firstresult=True)
def drivetrain_wrap_model(model: Any, run: Run, evaluation_mode: bool) -> Any:
    """Wrap a model for the chosen strategy (DDP, FSDP, a DeepSpeed engine, ...).

    *firstresult*: the active strategy answers.

    Args:
        model: the converted module: on the run's device, unless the strategy's
            ``StrategySpec.places_models`` says it places models itself (then where the user
            built it, possibly on the meta device).
        run: this process's run.
        evaluation_mode: the user asked for inference only (``prepare_model(...,
            evaluation_mode=True)``): no gradient synchronisation is needed.

    Return the wrapped module, or ``None`` to leave it as is (one process).
    """


@hookspec
def drivetrain_finalize_model(model: Any, run: Run) -> Any:
    """Last changes to a prepared model: compilation.

    *chained*. Called for every prepared model, whichever hook wrapped it
    (``drivetrain_wrap_model`` or ``drivetrain_prepare_objects``). Return the model to use
    from now on, or ``None`` to keep it.
    """


@hookspec(firstresult=True)
def drivetrain_compile_model(model: Any, run: Run, options: Any) -> Any:
    """Compile a prepared model whose wrapper must be compiled its own way (API 1.2).

    *firstresult*. Called by the plugin that provides the ``compile`` feature, from its
    ``drivetrain_finalize_model``, before it falls back to ``torch.compile``. A strategy
    whose wrapper owns forward and backward (a DeepSpeed engine) compiles through that
    wrapper here, so its hooks stay in place.

    Args:
        model: the prepared (wrapped) model.
        run: this process's run.
        options: the ``TorchDynamoPlugin`` asked for (``backend``, ``mode``,
            ``fullgraph``, ``dynamic``, ``options``).

    Return the model to use from now on (it may be ``model`` itself, compiled in place), or
    ``None`` when the model is not yours.
    """


@hookspec(firstresult=True)
def drivetrain_unwrap_model(model: Any, run: Run, keep_fp32_wrapper: bool) -> Any:
    """Return the user's module from inside a prepared model.

    *firstresult*. The core removes a ``torch.compile`` wrapper itself (``._orig_mod``);
    each strategy unwraps its own wrapper (``DistributedDataParallel.module``). Return
    ``None`` when the model is not wrapped by you.
    """


@hookspec(firstresult=True)
def drivetrain_no_sync(model: Any, run: Run) -> ContextManager[None] | None:
    """Return a context manager under which backward does not synchronise gradients.

    *firstresult*. Used by ``accumulate`` and ``no_sync``. Return ``None`` when the model
    needs nothing (one process).
    """


@hookspec(firstresult=True)
def drivetrain_sync_in_backward(model: Any, run: Run) -> ContextManager[None] | None:
    """Return a context manager under which the next backward synchronises gradients even
    inside ``no_sync`` (``accelerator.trigger_sync_in_backward``).

    *firstresult*. ``None`` when the model needs nothing.
    """


# --------------------------------------------------------------------------------------
# Wrap optimizer, and the rest of a step
# --------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def drivetrain_wrap_optimizer(optimizer: Any, run: Run) -> Any:
    """Return the optimizer wrapper of this run.

    *firstresult*. The default, used when no plugin answers, is
    :class:`drivetrain.optimizer.AcceleratedOptimizer`. A strategy whose engine owns the
    optimizer (DeepSpeed) returns its own wrapper.

    Called after every model of the same ``prepare`` call was wrapped. A strategy whose
    wrapper replaces parameters (FSDP) marks its implementation ``tryfirst``, points the
    optimizer's parameter groups at the replacements, and returns ``None`` to keep the
    default wrapper.
    """


@hookspec(firstresult=True)
def drivetrain_wrap_scheduler(scheduler: Any, optimizers: Sequence[Any], run: Run) -> Any:
    """Return the scheduler wrapper of this run.

    *firstresult*. The default is :class:`drivetrain.scheduler.AcceleratedScheduler`.

    Args:
        scheduler: the user's learning-rate scheduler.
        optimizers: the prepared optimizers it may drive.
    """


@hookspec
def drivetrain_wrap_dataloader(dataloader: Any, run: Run) -> Any:
    """Adjust a prepared data loader (an XLA device loader, say).

    *chained*. Called after the core has sharded the loader across processes. Return the
    loader to use, or ``None`` to keep it.
    """


@hookspec(firstresult=True)
def drivetrain_make_grad_scaler(run: Run, kwargs: dict[str, Any]) -> Any:
    """Create the gradient scaler of an fp16 run.

    *firstresult*. The precision plugin answers with a ``torch.amp.GradScaler``; a
    sharding strategy that needs its own scaler marks its implementation ``tryfirst``.
    ``kwargs`` come from ``GradScalerKwargs``. Return ``None`` when no scaler is needed.
    A strategy whose engine scales the loss itself (DeepSpeed) marks its implementation
    ``tryfirst`` and returns ``False``: the run then has no scaler at all.
    """


@hookspec(firstresult=True)
def drivetrain_autocast(run: Run, kwargs: dict[str, Any]) -> ContextManager[None] | None:
    """Return the context manager under which forward runs in the chosen precision.

    *firstresult*. ``kwargs`` come from ``AutocastKwargs`` (``enabled``,
    ``cache_enabled``). Return ``None`` when no autocast is needed.
    """


@hookspec(firstresult=True)
def drivetrain_backward(loss: Any, run: Run, kwargs: dict[str, Any], models: Sequence[Any]) -> bool | None:
    """Run backward for ``loss`` (already divided for gradient accumulation, unless the
    strategy set ``run.options["strategy_accumulates"]``).

    *firstresult*. Return ``True`` when done. A grad scaler scales the loss here; an
    engine that runs backward itself (DeepSpeed) marks its implementation ``tryfirst``.
    When nobody answers the core calls ``loss.backward(**kwargs)``.

    Args:
        loss: the loss tensor.
        run: this process's run.
        kwargs: the keyword arguments given to ``accelerator.backward``.
        models: the models prepared by the ``Accelerator`` calling (an engine that owns the
            step finds itself among them; several accelerators may share one run).
    """


@hookspec(firstresult=True)
def drivetrain_clip_grad_norm(parameters: Any, max_norm: float, norm_type: float, run: Run) -> Any:
    """Clip the gradient norm of ``parameters`` and return the total norm (a tensor).

    *firstresult*. The core unscales fp16 gradients first and, when nobody answers, calls
    ``torch.nn.utils.clip_grad_norm_``. Strategies whose parameters are sharded (FSDP)
    compute the norm across shards. An engine that clips inside its own step returns the
    norm it measured there, or ``False`` when it measured none (``accelerator.clip_grad_norm_``
    then returns ``None``): never an invented number.
    """


@hookspec(firstresult=True)
def drivetrain_clip_grad_value(parameters: Any, clip_value: float, run: Run) -> bool | None:
    """Clip each gradient of ``parameters`` to ``[-clip_value, clip_value]`` (API 1.2).

    *firstresult*. Called before the core unscales fp16 gradients and clips with
    ``torch.nn.utils.clip_grad_value_``; return ``None`` to let it. A strategy that cannot
    clip by value raises a :class:`drivetrain.errors.DrivetrainError` naming
    ``clip_grad_norm_`` instead, before changing anything: an engine that steps inside
    ``backward`` (the gradients are gone when the user clips), or gradients sharded across
    processes. Return ``True`` when you clipped yourself.
    """


# --------------------------------------------------------------------------------------
# Save state
# --------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def drivetrain_get_state_dict(model: Any, run: Run, unwrap: bool) -> dict[str, Any] | None:
    """Return the full state dict of a prepared model, gathered where it is sharded.

    *firstresult*. Every process calls it (gathering is collective); the result only
    needs to be complete on the main process. ``None`` lets the core call
    ``state_dict()`` on the unwrapped model.
    """


@hookspec(firstresult=True)
def drivetrain_save_model_state(
    model: Any, index: int, directory: str, run: Run, safe_serialization: bool, options: dict[str, Any]
) -> Sequence[str] | None:
    """Write the state of the ``index``-th prepared model into a checkpoint directory.

    *firstresult*. Called on every process. ``directory`` is the checkpoint being written
    (a temporary directory that is renamed into place once every process has finished).
    Return the file names written (relative to ``directory``) by this process, or ``None``
    to let the core write a safetensors file of ``drivetrain_get_state_dict`` on the main
    process. Do not sync the files: the core's commit fsyncs every file a process
    returns, after ``save_state`` has returned, and records their checksums in the manifest.
    ``options`` (API 1.2) are ``save_state``'s extra keyword arguments, meant for the
    strategy's own model-save function (DeepSpeed's ``save_checkpoint``).
    """


@hookspec(firstresult=True)
def drivetrain_load_model_state(model: Any, index: int, directory: str, run: Run, manifest: dict[str, Any],
                                options: dict[str, Any]) -> bool | None:
    """Read the state of the ``index``-th prepared model from a checkpoint directory.

    *firstresult*. ``manifest`` is the checkpoint's manifest (who wrote it, world size,
    files). Return ``True`` when loaded, ``None`` to let the core read the file it wrote.
    Raise :class:`drivetrain.errors.CheckpointError` when the checkpoint cannot be read by
    this strategy, with the reason. Every file the manifest lists has been checked against
    its checksum before this is called. Read pickles only through
    ``drivetrain.plugin_api.safe_torch_load``, and check shapes and dtypes before changing
    the model: a failed load must leave it as it was. ``options`` (API 1.2) are
    ``load_state``'s model keyword arguments (``strict``, ``map_location``, ...).
    """


@hookspec
def drivetrain_check_checkpoint(models: list[Any], optimizers: list[Any], directory: str, run: Run,
                                manifest: dict[str, Any], options: dict[str, Any]) -> None:
    """Check a checkpoint against every prepared model and optimizer before anything loads (API 1.5).

    Called on every active plugin, on every process, once every process has verified the
    checksums and checked the core's own states (so a check may call collectives, as a
    sharded model's ``state_dict`` does), and before any ``drivetrain_load_*_state``.
    ``models`` and ``optimizers`` are the prepared ones, in checkpoint order (``index`` is the
    position); ``options`` are ``load_state``'s model keyword arguments. Raise
    :class:`drivetrain.errors.CheckpointError` naming the first mismatch among the objects
    this plugin loads: the processes then agree, every one fails, and nothing has changed.
    Change nothing here.
    """


@hookspec(firstresult=True)
def drivetrain_save_optimizer_state(
    optimizer: Any, index: int, directory: str, run: Run
) -> Sequence[str] | None:
    """Write the state of the ``index``-th prepared optimizer. Same contract as the model's."""


@hookspec(firstresult=True)
def drivetrain_load_optimizer_state(optimizer: Any, index: int, directory: str, run: Run, manifest: dict[str, Any]) -> bool | None:
    """Read the state of the ``index``-th prepared optimizer. Same contract as the model's."""


@hookspec
def drivetrain_on_checkpoint(event: str, directory: str, run: Run) -> None:
    """Be told that a checkpoint was saved (``event="save"``) or loaded (``"load"``).

    Called on every active plugin, on the training thread. For ``"save"``: on the process
    that published the checkpoint (the main one, or each node's first with
    ``save_on_each_node``), once it is synced and in place, at the next ``log``,
    ``save_state``, ``load_state``, ``wait_for_everyone`` or ``end_training``. For
    ``"load"``: on every process, after the state is restored. The return value is ignored; an exception is logged, not
    raised.
    """
