"""The hook specifications: everything a plugin can tell or do for drivetrain.

A plugin is a module (the target of an entry point in the ``drivetrain.plugins`` group) that
declares ``PLUGIN_INFO`` and implements some of the hooks below with
``@drivetrain.plugin_api.hookimpl``. An implementation may accept fewer arguments than the
spec lists (pluggy passes only those it names); naming an argument the spec does not have,
or a hook that does not exist, gets the plugin refused with the reason.

Every spec documents each argument (``:param:``), what its return value means
(``:return:``), and ends with one line stating its calling convention and the plugin API
version it arrived in (``Run hook, *firstresult*, API 1.0.``); ``tests/test_hookspecs.py``
holds every spec to that. The kinds of hook:

**Registration hooks** (``drivetrain_register_*``, names, enumeration members,
``drivetrain_env_report``) are called once per process on every loaded plugin, including
those whose library is missing, so that drivetrain can list, explain and refuse them. They
must be cheap: return descriptors whose heavy parts are lazy references, import nothing
optional.

**Command-line hooks** (``drivetrain_add_launch_arguments``, ``drivetrain_launch_environment``,
``drivetrain_add_cli_commands``) are called on every loaded plugin when the ``drivetrain``
command builds its parser or starts a job; a raising one is skipped unless its plugin is
selected.

**Run hooks** (every hook taking ``run``) are called only on the plugins active in this run:
the chosen platform, cluster environment, strategy, precision, trackers, and the plugins
those declare. They are resolved once, when the ``Accelerator`` is built, so a training step
pays no discovery cost. ``run`` is the :class:`drivetrain.run.Run` of this process: the
process state, the names chosen for each role, the plugin-owned config sections and the
user's kwargs handlers. A strategy's or precision's run hooks may instead be methods of a
role object its descriptor names (``StrategySpec.hooks``, API 1.3): those are called only
while that item is the run's, so a plugin with several roles needs no check of the run's
choice in each hook.

The calling conventions:

- *firstresult*: implementations are called in order until one returns something other than
  ``None``; that answer wins and the rest are not called. ``None`` means "not mine, ask the
  next"; where a hook gives ``False`` a meaning of its own (the grad scaler, the clipped
  norm), ``False`` is an answer that stops the call.
- *chained*: every implementation is called with the value the previous one returned
  (``None`` keeps the value unchanged); the last value is used.
- *collected*: every implementation is called; each non-``None`` answer is used (merged or
  listed, as the hook says).
- *broadcast*: every implementation is called; the return value is ignored.

Order among implementations follows pluggy: ``tryfirst=True`` first, ``trylast=True`` last,
otherwise the plugin registered last first (a role object before modules). Precedence is
therefore stated by the marks plus the *firstresult* rule: a strategy that takes over a step
(DeepSpeed's engine runs backward itself) marks its implementation ``tryfirst`` and answers;
a plugin that only fills in a default marks it ``trylast``.

The order in which the model is transformed is fixed: device placement (platform) ->
``drivetrain_convert_model`` (precision conversions such as FP8 layers) ->
``drivetrain_wrap_model`` (the parallel wrapper of the strategy) ->
``drivetrain_finalize_model`` (compilation). A strategy whose
``StrategySpec.places_models`` is true places the model itself, in ``drivetrain_wrap_model``
(a sharding strategy shards first), and the core skips its own placement. A strategy that
answers ``drivetrain_prepare_objects`` takes the place of placement and wrapping: the core
still converts the models before handing them over and finalises the models it returns, so
every transform runs whatever the strategy.

Types named in the signatures are the real classes (imported for type checkers only, so
loading the specs imports no torch); ``Any`` remains where the hook truly takes anything
(the user's objects of a ``prepare`` call, keyword arguments, JSON manifests), as each
``:param:`` says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ContextManager, Iterable, Literal, Mapping, Sequence

from .plugin_api import hookspec

if TYPE_CHECKING:  # pragma: no cover - names for the type hints only
    import argparse
    import datetime

    import torch
    from torch.utils.data import DataLoader

    from .accelerator import Accelerator
    from .collectives import Collectives
    from .kwargs_handlers import TorchDynamoPlugin
    from .optimizer import AcceleratedOptimizer
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
    from .scheduler import AcceleratedScheduler

#: Hooks kept so that plugins implementing them still load (the plugin-API rules allow no
#: removal within a major version), but that nothing should implement any more: the plugin
#: manager warns once, naming the plugin and what to do instead. They go at API 2.0.
DEPRECATED_HOOKS: dict[str, str] = {
    "drivetrain_distributed_types": (
        "name the type in PlatformSpec.multi_process_type/single_process_type or "
        "StrategySpec.distributed_type (or contribute it with drivetrain_enum_members("
        "{'DistributedType': [...]}))"
    ),
}


# --------------------------------------------------------------------------------------
# Registration: what a plugin offers (called once per process on every loaded plugin)
# --------------------------------------------------------------------------------------


@hookspec
def drivetrain_register_platforms() -> Sequence[PlatformSpec] | None:
    """Describe the device platforms this plugin offers (detect environment).

    Each spec carries a probe that detection calls to ask whether the platform is usable
    here; nothing behind its ``factory`` is imported until it is chosen.

    :return: A list of :class:`~drivetrain.plugin_api.PlatformSpec`; empty or ``None`` for
        none. Each is checked on its own: a malformed one, or one whose name another plugin
        registered first, is refused with the reason and the plugin keeps the rest.

    Registration hook, *collected*, API 1.0.
    """


@hookspec
def drivetrain_register_cluster_environments() -> Sequence[ClusterEnvironmentSpec] | None:
    """Describe the cluster environments this plugin recognises (detect environment).

    A cluster environment is whatever started this process and knows its rank: torchrun,
    SLURM, MPI, a Kubernetes job. Probes read environment variables only.

    :return: A list of :class:`~drivetrain.plugin_api.ClusterEnvironmentSpec`; empty or
        ``None`` for none.

    Registration hook, *collected*, API 1.0.
    """


@hookspec
def drivetrain_register_strategies() -> Sequence[StrategySpec] | None:
    """Describe the distribution strategies this plugin offers (ddp, fsdp, deepspeed, ...).

    A strategy becomes active only when asked for, except the one marked ``automatic``
    (DDP), which a multi-process run with no strategy selected uses.

    :return: A list of :class:`~drivetrain.plugin_api.StrategySpec`; empty or ``None`` for
        none.

    Registration hook, *collected*, API 1.0.
    """


@hookspec
def drivetrain_register_precisions() -> Sequence[PrecisionSpec] | None:
    """Describe the mixed-precision modes this plugin offers (fp16, bf16, fp8, ...).

    :return: A list of :class:`~drivetrain.plugin_api.PrecisionSpec`; empty or ``None`` for
        none. Several backends of one name may coexist (``fp8`` by two libraries).

    Registration hook, *collected*, API 1.0.
    """


@hookspec
def drivetrain_register_trackers() -> Sequence[TrackerSpec] | None:
    """Describe the experiment trackers this plugin offers.

    ``log_with="all"`` uses every tracker of an available plugin.

    :return: A list of :class:`~drivetrain.plugin_api.TrackerSpec`; empty or ``None`` for
        none.

    Registration hook, *collected*, API 1.0.
    """


@hookspec
def drivetrain_register_launchers() -> Sequence[LauncherSpec] | None:
    """Describe the ways this plugin can start a job's processes (``drivetrain launch``).

    The launcher whose ``applies(args)`` is true with the highest priority runs the job.

    :return: A list of :class:`~drivetrain.plugin_api.LauncherSpec`; empty or ``None`` for
        none.

    Registration hook, *collected*, API 1.0.
    """


@hookspec
def drivetrain_register_config_sections() -> Sequence[ConfigSection] | None:
    """Describe the config-file blocks this plugin owns (``fsdp_config:``, ...).

    The config loader validates each block against its fields, and ``drivetrain config``
    asks their questions. A key owned by no installed plugin is an error naming the plugin
    that would own it if one is known, or the allowed keys.

    :return: A list of :class:`~drivetrain.plugin_api.ConfigSection` (``key=""`` for
        top-level keys the plugin owns); empty or ``None`` for none.

    Registration hook, *collected*, API 1.0.
    """


@hookspec
def drivetrain_add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this plugin's options to ``drivetrain launch``.

    The parsed values reach the children through ``drivetrain_launch_environment``.

    :param parser: The launch command's parser. Add one argument group named after the
        plugin (``parser.add_argument_group("FSDP")``). Spell options with dashes; drivetrain
        accepts the underscore spelling too.
    :return: Ignored.

    Command-line hook, *broadcast*, API 1.0.
    """


@hookspec
def drivetrain_launch_environment(args: argparse.Namespace) -> dict[str, str] | None:
    """Turn parsed launch arguments into environment variables for the children.

    :param args: The parsed ``drivetrain launch`` namespace, already merged with the config
        file (command line wins).
    :return: A mapping of variables to set in every child (``{"FSDP_SHARDING_STRATEGY":
        "FULL_SHARD"}``), or ``None`` for none. All answers are merged; two plugins setting
        one variable to different values is an error.

    Command-line hook, *collected*, API 1.0.
    """


@hookspec
def drivetrain_add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add sub-commands to the ``drivetrain`` command line (``merge-weights``, ...).

    :param subparsers: The object ``ArgumentParser.add_subparsers`` returned. Each new
        parser must ``set_defaults(handler=callable)``; the callable receives the parsed
        namespace and returns an exit code.
    :return: Ignored.

    Command-line hook, *broadcast*, API 1.0.
    """


@hookspec
def drivetrain_public_names() -> dict[str, str] | None:
    """Contribute names that users import from ``drivetrain`` (compatibility names).

    The name is resolved on first access (``from drivetrain import DeepSpeedPlugin``), so the
    plugin's library is imported only when the user touches it. A key may name the module it
    belongs to, relative to ``drivetrain``: ``"tracking.WandBTracker"`` is importable as
    ``from drivetrain.tracking import WandBTracker``, ``"utils.is_deepspeed_available"`` from
    ``drivetrain.utils``. A plain key belongs to ``drivetrain`` (and ``drivetrain.utils``,
    which offers every top-level name). Every submodule of ``drivetrain.utils`` serves its own
    keys the same way: ``"utils.environment.override_numa_affinity"`` is importable from
    ``drivetrain.utils.environment``; a name the module defines itself cannot be replaced.

    :return: A mapping from a public name to a lazy reference
        (``{"DeepSpeedPlugin": "drivetrain_deepspeed.config:DeepSpeedPlugin"}``), or ``None``.
        Two plugins contributing one name is reported as a conflict and the first loaded wins.

    Registration hook, *collected*, API 1.0.
    """


@hookspec
def drivetrain_fallback_names() -> dict[str, str] | None:
    """Contribute stand-ins for names whose owner may not be installed.

    A fallback is used only when no plugin contributes the name through
    :func:`drivetrain_public_names`. This is how ``drivetrain.utils.is_megatron_lm_available``
    answers ``False`` where no plugin offers that backend: a compatibility plugin lists the
    availability probes a user may call, and the plugin that owns a backend contributes the
    real probe.

    :return: The same form as :func:`drivetrain_public_names` (module-qualified keys
        allowed), ranked below it; ``None`` for none.

    Registration hook, *collected*, API 1.2.
    """


@hookspec
def drivetrain_distributed_types() -> Sequence[str] | None:
    """Deprecated: contribute members of the ``DistributedType`` enumeration (``"FSDP"``).

    Superseded by the descriptors: a platform's ``multi_process_type`` and
    ``single_process_type`` and a strategy's ``distributed_type`` are members already, and
    ``drivetrain_enum_members({"DistributedType": [...]})`` adds one with nothing behind it.
    No built-in plugin implements it. A plugin that still does loads and is heard (the
    plugin-API rules remove nothing within a major version), with one warning naming it; the
    hook goes at API 2.0 (:data:`DEPRECATED_HOOKS`).

    :return: The upper-case names; each becomes ``DistributedType.NAME``, equal to the
        string ``"NAME"``, and a ``distributed_type`` the config file accepts. ``None`` for
        none.

    Registration hook, *collected*, API 1.0.
    """


@hookspec
def drivetrain_enum_members() -> dict[str, Sequence[str] | Mapping[str, str]] | None:
    """Contribute members to drivetrain's open enumerations.

    Members of backends that are not installed are still contributed (a compatibility
    plugin lists Accelerate's), so user code that compares against them runs.

    :return: ``{enum class name: members}`` where members is a list of values (the member
        name is the upper-cased value: ``["fp8"]`` gives ``PrecisionType.FP8``) or a mapping
        from member name to value (``{"COMETML": "comet_ml"}``); ``None`` for none. A member
        two plugins contribute keeps the first value.

    Registration hook, *collected*, API 1.2.
    """


@hookspec
def drivetrain_env_report() -> Sequence[EnvReportLine] | None:
    """Contribute lines to ``drivetrain env`` (library versions, device names, ...).

    Keep it fast and never raise: a failing implementation is reported as a line of its own.

    :return: A list of :class:`~drivetrain.plugin_api.EnvReportLine`; empty or ``None`` for
        none.

    Registration hook, *collected*, API 1.0.
    """


# --------------------------------------------------------------------------------------
# Detect environment: bring this process into its distributed setup (active plugins)
# --------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def drivetrain_init_distributed(
    run: Run, timeout: datetime.timedelta, backend: str | None, init_method: str | None
) -> bool | None:
    """Join this process to its peers (create the default process group).

    Called once per process, when a run has more than one process and no group exists yet.
    A platform with its own runtime (XLA) marks its implementation ``tryfirst``.

    :param run: This process's run.
    :param timeout: How long a collective may take before it fails (from
        ``InitProcessGroupKwargs``, ``DRIVETRAIN_TIMEOUT`` or the default).
    :param backend: The communication backend asked for, or ``None`` for the platform's
        default.
    :param init_method: URL for the rendezvous, or ``None`` for environment variables.
    :return: ``True`` once the group exists; ``None`` when this plugin does not connect this
        run. When nobody answers ``True`` the run fails with a ``DistributedError``.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_collectives(run: Run) -> Collectives | None:
    """Provide the collective operations of this run (collective ops).

    Called once per multi-process run. Every operation in ``drivetrain.utils`` goes through
    the answer, so a platform with its own communication runtime replaces all of them at once
    by marking its implementation ``tryfirst``.

    :param run: This process's run.
    :return: An object implementing :class:`drivetrain.collectives.Collectives`
        (``all_gather``, ``all_reduce``, ``all_gather_into``, ``broadcast``, ``barrier``,
        ``all_gather_object``, ``broadcast_object_list``), or ``None`` when this plugin does
        not connect this run. Nobody answering is a ``DistributedError``.

    Run hook, *firstresult*, API 1.0.
    """


# --------------------------------------------------------------------------------------
# Configure the run for an Accelerator (active plugins)
# --------------------------------------------------------------------------------------


@hookspec
def drivetrain_configure_run(run: Run, accelerator: Accelerator) -> object | None:
    """Configure the run for an ``Accelerator`` that was just built.

    Called at the end of ``Accelerator.__init__``, once the user's strategy arguments are in
    ``run.options`` and the kwargs handlers in ``run.handler_kwargs``; again for each further
    ``Accelerator`` of the process. A strategy resolves and checks its options here (building
    its option object from environment variables when the user gave none), may set
    ``run.options["strategy_accumulates"]`` and the accelerator's
    ``gradient_accumulation_steps``, and fails early on a bad combination.

    :param run: This process's run.
    :param accelerator: The new ``Accelerator``.
    :return: ``None``, or an object (of any class: only its public attributes matter) that
        ``AcceleratorState``, ``GradientState`` and the ``Accelerator`` consult for an
        attribute they do not have themselves: Accelerate's attributes that belong to a
        backend (``state.deepspeed_plugin``, ``state.select_deepspeed_plugin(name)``). They
        are looked up on every access, so the object may compute them. Every answer is kept.

    Run hook, *collected*, API 1.0.
    """


# --------------------------------------------------------------------------------------
# Wrap model
# --------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def drivetrain_prepare_objects(
    objects: Sequence[Any], run: Run, device_placement: Sequence[bool], accelerator: Accelerator
) -> Sequence[Any] | None:
    """Prepare all objects of one ``accelerator.prepare(...)`` call together.

    Most strategies leave this alone and the core prepares each object through the hooks
    below. A strategy that must see models, optimizers and schedulers at once answers here:
    an engine built from all three (DeepSpeed). It stands for placement and
    ``drivetrain_wrap_model`` only: the models it receives have already been through
    ``drivetrain_convert_model`` (where the user built them: the strategy places them), and
    each model it returns in a model's position goes through ``drivetrain_finalize_model``
    (compilation) before the user gets it (API 1.2). A model whose wrapper must be compiled
    its own way answers ``drivetrain_compile_model``. Parameters that change identity when
    sharded (FSDP) need not answer: the core wraps every model of the call before it prepares
    any optimizer, so ``drivetrain_wrap_optimizer`` can point an optimizer created before
    ``prepare`` at the new parameters.

    :param objects: What the user passed, in order (flattened from lists and tuples): any
        object may be there, which is why it is ``Any``. Data loaders among them are already
        prepared by the core (sharded across processes), so their batch size per process is
        known.
    :param run: This process's run.
    :param device_placement: For each object, whether the user wants it moved to the device.
    :param accelerator: The ``Accelerator`` whose ``prepare`` this is (its gradient
        accumulation steps, the data loaders it prepared earlier). Read it; the core records
        what this hook returns.
    :return: The prepared objects, in the same order and number, or ``None`` to let the core
        prepare them one by one. The accelerator records every returned ``torch.nn.Module``
        as a prepared model, every ``torch.optim.Optimizer`` as a prepared optimizer and
        every learning-rate scheduler as a prepared scheduler (for ``backward``,
        ``save_state``, ...); anything else is handed back to the user as it is.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec
def drivetrain_transform_objects(
    objects: Sequence[Any], run: Run, accelerator: Accelerator
) -> Sequence[Any] | None:
    """Rewrite the models and optimizers of one ``accelerator.prepare(...)`` call together,
    before anything else is done to them.

    Called at the start of every ``prepare``, once its data loaders are prepared, whatever
    the strategy. A library that optimises a model together with its optimizer (kernels
    swapped, master weights kept beside low-precision ones: Intel Extension for PyTorch's
    ``optimize``) answers here, so the strategy then places and wraps what it returned as it
    would the user's objects (DDP composes with it).

    :param objects: What the user passed, in order (flattened; any object, hence ``Any``);
        data loaders already prepared, models and optimizers as given (a model prepared
        earlier may be among them). Each implementation receives the previous one's list.
    :param run: This process's run.
    :param accelerator: The ``Accelerator`` whose ``prepare`` this is.
    :return: A list of the same length, each replacement in the position of what it
        replaces, or ``None`` to keep the objects.

    Run hook, *chained*, API 1.4.
    """


@hookspec
def drivetrain_convert_model(model: torch.nn.Module, run: Run) -> torch.nn.Module | None:
    """Convert a model's layers or dtypes for the chosen precision, before wrapping.

    FP8 plugins swap linear layers here; the parallel wrapper comes afterwards. A strategy
    whose engine runs the model in its own precision answers ``drivetrain_autocast`` first
    (``tryfirst``, with a context that does nothing): a precision plugin that would wrap
    ``forward`` in autocast asks the run's ``drivetrain_autocast`` here and leaves the model
    alone unless the answer is its own autocast (that question is the contract between a
    precision and a strategy).

    :param model: The module, as the previous implementation left it: on the run's device,
        unless the strategy places models itself (``StrategySpec.places_models``, or a
        strategy answering ``drivetrain_prepare_objects``): then where the user built it.
    :param run: This process's run.
    :return: The converted module, or ``None`` to keep it.

    Run hook, *chained*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_wrap_model(model: torch.nn.Module, run: Run, evaluation_mode: bool) -> torch.nn.Module | None:
    """Wrap a model for the chosen strategy (DDP, FSDP, a DeepSpeed engine, ...).

    :param model: The converted module: on the run's device, unless the strategy's
        ``StrategySpec.places_models`` says it places models itself (then where the user
        built it, possibly on the meta device).
    :param run: This process's run.
    :param evaluation_mode: The user asked for inference only (``prepare_model(...,
        evaluation_mode=True)``): no gradient synchronisation is needed.
    :return: The wrapped module; ``None`` leaves it as it is (one process, or not yours).

    Run hook, *firstresult*, API 1.0.
    """


@hookspec
def drivetrain_finalize_model(model: torch.nn.Module, run: Run) -> torch.nn.Module | None:
    """Last changes to a prepared model: compilation.

    Called for every prepared model, whichever hook wrapped it (``drivetrain_wrap_model`` or
    ``drivetrain_prepare_objects``).

    :param model: The wrapped model, as the previous implementation left it.
    :param run: This process's run.
    :return: The model to use from now on, or ``None`` to keep it.

    Run hook, *chained*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_compile_model(
    model: torch.nn.Module, run: Run, options: TorchDynamoPlugin
) -> torch.nn.Module | None:
    """Compile a prepared model whose wrapper must be compiled its own way.

    Called by the plugin that provides the ``compile`` feature, from its
    ``drivetrain_finalize_model``, before it falls back to ``torch.compile``. A strategy whose
    wrapper owns forward and backward (a DeepSpeed engine) compiles through that wrapper
    here, so its hooks stay in place.

    :param model: The prepared (wrapped) model.
    :param run: This process's run.
    :param options: The compilation asked for (``backend``, ``mode``, ``fullgraph``,
        ``dynamic``, ``options``).
    :return: The model to use from now on (it may be ``model`` itself, compiled in place),
        or ``None`` when the model is not yours.

    Run hook, *firstresult*, API 1.2.
    """


@hookspec(firstresult=True)
def drivetrain_unwrap_model(model: torch.nn.Module, run: Run, keep_fp32_wrapper: bool) -> torch.nn.Module | None:
    """Return the user's module from inside a prepared model.

    The core removes a ``torch.compile`` wrapper itself (``._orig_mod``); each strategy
    unwraps its own wrapper (``DistributedDataParallel.module``).

    :param model: A prepared model, its compile wrapper already removed.
    :param run: This process's run.
    :param keep_fp32_wrapper: Keep the precision's forward wrapper (autocast, fp32 outputs)
        in place; ``False`` asks for the bare module.
    :return: The module inside, or ``None`` when the model is not wrapped by you.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_no_sync(model: torch.nn.Module, run: Run) -> ContextManager[None] | None:
    """Return a context manager under which backward does not synchronise gradients.

    Used by ``accumulate`` and ``no_sync``.

    :param model: A prepared model.
    :param run: This process's run.
    :return: The context manager, or ``None`` when the model needs nothing (one process, or
        not yours).

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_sync_in_backward(model: torch.nn.Module, run: Run) -> ContextManager[None] | None:
    """Return a context manager under which the next backward synchronises gradients even
    inside ``no_sync`` (``accelerator.trigger_sync_in_backward``).

    :param model: A prepared model.
    :param run: This process's run.
    :return: The context manager, or ``None`` when the model needs nothing.

    Run hook, *firstresult*, API 1.0.
    """


# --------------------------------------------------------------------------------------
# Wrap optimizer, and the rest of a step
# --------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def drivetrain_wrap_optimizer(optimizer: torch.optim.Optimizer, run: Run) -> AcceleratedOptimizer | None:
    """Return the optimizer wrapper of this run.

    Called after every model of the same ``prepare`` call was wrapped. A strategy whose
    engine owns the optimizer (DeepSpeed) returns its own wrapper. A strategy whose wrapper
    replaces parameters (FSDP) marks its implementation ``tryfirst``, points the optimizer's
    parameter groups at the replacements, and returns ``None`` to keep the default wrapper.

    :param optimizer: The user's optimizer.
    :param run: This process's run.
    :return: A :class:`drivetrain.plugin_api.AcceleratedOptimizer` (or a subclass), or
        ``None`` for the core's default ``AcceleratedOptimizer``.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_wrap_scheduler(
    scheduler: torch.optim.lr_scheduler.LRScheduler, optimizers: Sequence[AcceleratedOptimizer], run: Run
) -> AcceleratedScheduler | None:
    """Return the scheduler wrapper of this run.

    :param scheduler: The user's learning-rate scheduler.
    :param optimizers: The prepared optimizers it may drive (the one wrapping its optimizer,
        or all of them).
    :param run: This process's run.
    :return: A :class:`drivetrain.plugin_api.AcceleratedScheduler` (or a subclass), or
        ``None`` for the core's default.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec
def drivetrain_wrap_dataloader(dataloader: DataLoader, run: Run) -> Iterable[Any] | None:
    """Adjust a prepared data loader (an XLA device loader, say).

    Called after the core has sharded the loader across processes.

    :param dataloader: The prepared loader (sharded, placing batches on the device), as the
        previous implementation left it.
    :param run: This process's run.
    :return: The loader to use (anything that iterates over batches: the batches are the
        user's, hence ``Any``), or ``None`` to keep it.

    Run hook, *chained*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_make_grad_scaler(run: Run, kwargs: dict[str, Any]) -> torch.amp.GradScaler | Literal[False] | None:
    """Create the gradient scaler of the run.

    Called once per ``Accelerator``. The precision plugin answers for fp16; a sharding
    strategy that needs its own scaler marks its implementation ``tryfirst``.

    :param run: This process's run.
    :param kwargs: The keyword arguments of ``GradScalerKwargs`` (values of any type, as
        ``torch.amp.GradScaler`` takes them).
    :return: The scaler; ``None`` when this plugin has none to offer (ask the next);
        ``False`` from a strategy whose engine scales the loss itself (DeepSpeed, marked
        ``tryfirst``): the run then has no scaler at all.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_autocast(run: Run, kwargs: dict[str, Any]) -> ContextManager[None] | None:
    """Return the context manager under which forward runs in the chosen precision.

    Called by ``accelerator.autocast()`` and by precision plugins: one that wraps a model's
    ``forward`` asks it from ``drivetrain_convert_model`` (with ``kwargs={}``) and wraps only
    when the answer is a ``torch.autocast``. A strategy whose engine runs the model in its
    own precision (DeepSpeed) marks its implementation ``tryfirst`` and answers a context
    that does nothing, which tells both that forward must be left alone.

    :param run: This process's run.
    :param kwargs: The keyword arguments of ``AutocastKwargs`` (``enabled``,
        ``cache_enabled``).
    :return: The context manager, or ``None`` when no autocast is needed (ask the next; the
        core then runs the block as it is).

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_backward(
    loss: torch.Tensor, run: Run, kwargs: dict[str, Any], models: Sequence[torch.nn.Module]
) -> bool | None:
    """Run backward for ``loss``.

    A grad scaler scales the loss here; an engine that runs backward itself (DeepSpeed) marks
    its implementation ``tryfirst``.

    :param loss: The loss tensor, already divided for gradient accumulation unless the
        strategy set ``run.options["strategy_accumulates"]``.
    :param run: This process's run.
    :param kwargs: The keyword arguments given to ``accelerator.backward`` (passed on to
        ``loss.backward``, any type).
    :param models: The models prepared by the ``Accelerator`` calling (an engine that owns
        the step finds itself among them; several accelerators may share one run). API 1.1.
    :return: ``True`` when done; ``None`` to let the next implementation, and finally the
        core (``loss.backward(**kwargs)``).

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_clip_grad_norm(
    parameters: Sequence[torch.Tensor], max_norm: float, norm_type: float, run: Run
) -> torch.Tensor | Literal[False] | None:
    """Clip the gradient norm of ``parameters`` and return the total norm.

    The core unscales fp16 gradients first. Strategies whose parameters are sharded (FSDP)
    compute the norm across shards.

    :param parameters: The parameters the user passed, as a list.
    :param max_norm: The largest norm allowed.
    :param norm_type: The order of the norm (``2.0``, ``inf``).
    :param run: This process's run.
    :return: The total norm (a tensor); ``None`` to let the core call
        ``torch.nn.utils.clip_grad_norm_``; ``False`` from an engine that clips inside its
        own step and measured no norm (``accelerator.clip_grad_norm_`` then returns
        ``None``): never an invented number.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_clip_grad_value(parameters: Sequence[torch.Tensor], clip_value: float, run: Run) -> bool | None:
    """Clip each gradient of ``parameters`` to ``[-clip_value, clip_value]``.

    Called before the core unscales fp16 gradients and clips with
    ``torch.nn.utils.clip_grad_value_``. A strategy that cannot clip by value raises a
    :class:`drivetrain.errors.DrivetrainError` naming ``clip_grad_norm_`` instead, before
    changing anything: an engine that steps inside ``backward`` (the gradients are gone when
    the user clips), or gradients sharded across processes.

    :param parameters: The parameters the user passed, as a list.
    :param clip_value: The largest absolute value a gradient may keep.
    :param run: This process's run.
    :return: ``True`` when you clipped yourself; ``None`` to let the core.

    Run hook, *firstresult*, API 1.2.
    """


# --------------------------------------------------------------------------------------
# Save state
# --------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def drivetrain_get_state_dict(model: torch.nn.Module, run: Run, unwrap: bool) -> dict[str, torch.Tensor] | None:
    """Return the full state dict of a prepared model, gathered where it is sharded.

    Every process calls it (gathering is collective); the result only needs to be complete
    on the main process.

    :param model: A prepared model.
    :param run: This process's run.
    :param unwrap: Key the state as the user's module names it (``True``), or as the
        prepared wrapper does.
    :return: The state dict, or ``None`` to let the core call ``state_dict()`` on the
        (unwrapped) model.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_save_model_state(
    model: torch.nn.Module, index: int, directory: str, run: Run, safe_serialization: bool, options: dict[str, Any]
) -> Sequence[str] | None:
    """Write the state of the ``index``-th prepared model into a checkpoint directory.

    Called on every process. Do not sync the files: the core's commit fsyncs every file a
    process returns, after ``save_state`` has returned, and records their checksums in the
    manifest.

    :param model: The prepared model.
    :param index: Its position among the accelerator's prepared models.
    :param directory: The checkpoint being written (a temporary directory that is renamed
        into place once every process has finished).
    :param run: This process's run.
    :param safe_serialization: The user asked for safetensors (``save_state``'s argument).
    :param options: ``save_state``'s extra keyword arguments (any type), meant for the
        strategy's own model-save function (DeepSpeed's ``save_checkpoint``). API 1.2.
    :return: The file names written by this process (relative to ``directory``), or
        ``None`` to let the core write a safetensors file of ``drivetrain_get_state_dict`` on
        the main process.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_load_model_state(model: torch.nn.Module, index: int, directory: str, run: Run,
                                manifest: dict[str, Any], options: dict[str, Any]) -> bool | None:
    """Read the state of the ``index``-th prepared model from a checkpoint directory.

    Every file the manifest lists has been checked against its checksum, and
    ``drivetrain_check_checkpoint`` has passed, before this is called. Read pickles only
    through ``drivetrain.plugin_api.safe_torch_load``, and check shapes and dtypes before
    changing the model: a failed load must leave it as it was.

    :param model: The prepared model.
    :param index: Its position among the accelerator's prepared models.
    :param directory: The checkpoint directory.
    :param run: This process's run.
    :param manifest: The checkpoint's manifest, as read from its JSON (who wrote it, world
        size, files).
    :param options: ``load_state``'s model keyword arguments (``strict``, ``map_location``,
        ...; any type). API 1.2.
    :return: ``True`` when loaded; ``None`` to let the core read the file it wrote. Raise
        :class:`drivetrain.errors.CheckpointError` when the checkpoint cannot be read by
        this strategy, with the reason.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec
def drivetrain_check_checkpoint(models: list[torch.nn.Module], optimizers: list[AcceleratedOptimizer],
                                directory: str, run: Run, manifest: dict[str, Any], options: dict[str, Any]) -> None:
    """Check a checkpoint against every prepared model and optimizer before anything loads.

    Called on every process, once every process has verified the checksums and checked the
    core's own states (so a check may call collectives, as a sharded model's ``state_dict``
    does), and before any ``drivetrain_load_*_state``. Change nothing here.

    :param models: The prepared models, in checkpoint order (``index`` is the position).
    :param optimizers: The prepared optimizers, in checkpoint order.
    :param directory: The checkpoint directory.
    :param run: This process's run.
    :param manifest: The checkpoint's manifest, as read from its JSON.
    :param options: ``load_state``'s model keyword arguments (any type).
    :return: Ignored. Raise :class:`drivetrain.errors.CheckpointError` naming the first
        mismatch among the objects this plugin loads: the processes then agree, every one
        fails, and nothing has changed.

    Run hook, *broadcast*, API 1.5.
    """


@hookspec(firstresult=True)
def drivetrain_save_optimizer_state(
    optimizer: AcceleratedOptimizer, index: int, directory: str, run: Run
) -> Sequence[str] | None:
    """Write the state of the ``index``-th prepared optimizer. Same contract as the model's.

    :param optimizer: The prepared optimizer.
    :param index: Its position among the accelerator's prepared optimizers.
    :param directory: The checkpoint being written.
    :param run: This process's run.
    :return: The file names written by this process, or ``None`` to let the core write the
        optimizer's state on the main process.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_load_optimizer_state(optimizer: AcceleratedOptimizer, index: int, directory: str, run: Run,
                                    manifest: dict[str, Any]) -> bool | None:
    """Read the state of the ``index``-th prepared optimizer. Same contract as the model's.

    :param optimizer: The prepared optimizer.
    :param index: Its position among the accelerator's prepared optimizers.
    :param directory: The checkpoint directory, its checksums verified.
    :param run: This process's run.
    :param manifest: The checkpoint's manifest, as read from its JSON.
    :return: ``True`` when loaded; ``None`` to let the core read the file it wrote.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec
def drivetrain_on_checkpoint(event: Literal["save", "load"], directory: str, run: Run) -> None:
    """Be told that a checkpoint was saved or loaded.

    Called on the training thread. For ``"save"``: on the process that published the
    checkpoint (the main one, or each node's first with ``save_on_each_node``), once it is
    synced and in place, at the next ``log``, ``save_state``, ``load_state``,
    ``wait_for_everyone`` or ``end_training`` (at once with
    ``DRIVETRAIN_CHECKPOINT_BACKGROUND=0``). For ``"load"``: on every process, after the
    state is restored.

    :param event: ``"save"`` or ``"load"``.
    :param directory: The checkpoint's directory (its final name).
    :param run: This process's run.
    :return: Ignored. An exception is logged as a warning, not raised: a notification
        never costs a checkpoint (the trackers are still told).

    Run hook, *broadcast*, API 1.0.
    """
