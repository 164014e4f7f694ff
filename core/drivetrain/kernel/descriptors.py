"""The hook marker, the plugin's declaration and the descriptors that registration hooks return.

Imported when plugins are discovered, so it stays cheap: no torch, no optional library.
Descriptors name their heavy parts lazily (a ``"module:attribute"`` string or a callable),
and nothing behind them is imported until a plugin is chosen.
"""

from __future__ import annotations

import importlib
from dataclasses import field
from typing import Any, Callable, Mapping, Sequence, Union

import pluggy

from .records import FrozenRecord, frozen_record

__all__ = [
    "ATTRIBUTE_OWNERS", "PROJECT_NAME", "BackendAttribute", "ClusterEnvironmentSpec", "ConfigField", "ConfigSection", "EnvReportLine", "LauncherSpec",
    "LazyRef", "PlatformSpec", "PluginInfo", "PrecisionSpec", "Probe", "StrategySpec", "TrackerSpec", "hookimpl",
    "hookspec", "resolve",
]

PROJECT_NAME = "drivetrain"

#: Marks a function of a plugin module as the implementation of the hook of the same name.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
#: Marks a hook specification (used by ``drivetrain.hookspecs`` only).
hookspec = pluggy.HookspecMarker(PROJECT_NAME)

#: A lazily imported object: ``"package.module:Attribute"``, or anything callable.
LazyRef = Union[str, Callable[..., Any]]


def resolve(ref: LazyRef) -> Any:
    """Import the object a ``"module:attribute"`` reference names (callables pass through)."""
    if not isinstance(ref, str):
        return ref
    module_name, _, attribute = ref.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, attribute.split(".")):
        obj = getattr(obj, part)
    return obj


@frozen_record
class PluginInfo(FrozenRecord):
    """A plugin module's declaration, read before any of its hooks is called.

    A plugin module (the target of its ``drivetrain.plugins`` entry point) defines
    ``PLUGIN_INFO = PluginInfo(...)``.

    Attributes:
        api_version: the plugin API version the plugin was written for ("MAJOR.MINOR").
        description: one line shown by ``drivetrain plugins list``.
        requires: requirement strings (``"deepspeed>=0.14"``) of the distributions the
            plugin needs at run time. They are checked from package metadata, without
            importing anything; when one is missing the plugin is listed as unavailable.
        extra: the pip extra of drivetrain that installs ``requires``
            (``pip install drivetrain[extra]``); third-party plugins may leave it empty and
            set ``install_hint`` instead.
        install_hint: the command that installs what is missing, when it is not an extra.
        features: optional capabilities the plugin provides to any run that asks for them
            (``"compile"``); the run activates every usable plugin that declares a
            feature the user requested.
    """

    api_version: str
    description: str = ""
    requires: Sequence[str] = ()
    extra: str | None = None
    install_hint: str | None = None
    features: Sequence[str] = ()

    def how_to_install(self) -> str:
        if self.install_hint:
            return self.install_hint
        if self.extra:
            return f"pip install 'drivetrain[{self.extra}]'"
        return "pip install " + " ".join(repr(r) for r in self.requires)


@frozen_record
class Probe(FrozenRecord):
    """The answer of a cheap detection probe: is this usable here, and why (not)."""

    available: bool
    reason: str
    details: Mapping[str, Any] = field(default_factory=dict)


def _always(reason: str) -> Callable[[], Probe]:
    return lambda: Probe(True, reason)


@frozen_record
class PlatformSpec(FrozenRecord):
    """A device platform (cpu, cuda, mps, xla, ...), returned by ``drivetrain_register_platforms``.

    Attributes:
        name: the name users select (``--platform NAME``, ``platform:`` in the config).
        factory: lazy reference to a zero-argument callable returning a
            :class:`drivetrain.platform.Platform`.
        probe: zero-argument callable answering "is this platform usable in this process?".
            It may import the platform's library; it is only called when detection runs.
        priority: auto-detection picks the usable platform with the highest priority
            (cpu is 0, cuda 100). A third-party platform declares its own.
        multi_process_type: the ``DistributedType`` value of a multi-process run with no
            sharding strategy on this platform (``"MULTI_CPU"``, ``"MULTI_GPU"``, ...).
        single_process_type: the ``DistributedType`` of a single-process run (``"NO"``).
        precisions: mixed-precision names this platform supports, or ``None`` for any.
        communication: the plugin whose ``drivetrain_init_distributed`` and
            ``drivetrain_collectives`` connect this platform's processes
            (``"torch_distributed"``), or ``None`` when the platform's own plugin does.
    """

    name: str
    factory: LazyRef
    probe: Callable[[], Probe] = field(default_factory=lambda: _always("always available"))
    priority: int = 0
    multi_process_type: str = "MULTI_CPU"
    single_process_type: str = "NO"
    precisions: Sequence[str] | None = None
    communication: str | None = None
    description: str = ""


@frozen_record
class ClusterEnvironmentSpec(FrozenRecord):
    """A way processes learn their rank and peers (torchrun, SLURM, MPI, Kubernetes, ...).

    Attributes:
        name: the environment's name, shown by ``plugins list --detect``.
        factory: lazy reference to a zero-argument callable returning a
            :class:`drivetrain.cluster.ClusterEnvironment`.
        probe: reads the process environment (variables only, no import of torch) and says
            whether this process was started by that environment.
        priority: when several probes say yes (a SLURM job running torchrun), the highest
            priority wins: the most specific launcher should be the highest.
    """

    name: str
    factory: LazyRef
    probe: Callable[[], Probe]
    priority: int = 0
    description: str = ""


@frozen_record
class StrategySpec(FrozenRecord):
    """A way to distribute a model (ddp, fsdp, deepspeed, megatron, ...).

    Attributes:
        name: the name users select (``distributed_type: FSDP`` maps to ``fsdp``).
        distributed_type: the ``DistributedType`` value a run with this strategy reports,
            or ``None`` to keep the platform's.
        platforms: platform names this strategy supports, or ``None`` for any.
        precisions: mixed-precision names it supports, or ``None`` for any.
        needs_multiple_processes: ``True`` when it only makes sense with several processes.
        automatic: ``True`` for the strategy chosen, without being asked, for a
            multi-process run (DDP). Sharding strategies are never automatic.
        config_section: the config-file block that configures it (``"fsdp_config"``).
        accelerator_arguments: keyword arguments of ``Accelerator(...)`` that carry this
            strategy's options (``"fsdp_plugin"``); giving one selects the strategy, and the
            strategy object gets the value in its ``arguments`` under the same name.
        composes_arguments: ``accelerator_arguments`` of other strategies this one uses when
            they are given together with its own (a device-mesh strategy that shards with
            FSDP takes ``fsdp_plugin`` beside ``parallelism_config``); they reach its
            ``arguments`` too, and the strategy that declares them is not selected. When
            this strategy is the requested one (launcher, config file, variables), they may
            also be given alone and this strategy stays.
        places_models: ``True`` when the strategy puts models on the run's device itself, in
            ``drivetrain_wrap_model``, so the core does not move them first. A sharding
            strategy shards a model before moving it (a model larger than one device then
            fits, and weights on the meta device are filled instead of copied).
        hooks: lazy reference to this strategy's class, a subclass of
            :class:`drivetrain.plugin_api.Strategy` (API 2.0): each run that chooses the
            strategy builds one object, ``cls(run, arguments)`` (``run.strategy``), keeping that
            run's state as attributes; the core calls its step methods directly, and its
            ``@hookimpl`` methods are run hooks of that run only. ``None``: the plain
            ``Strategy`` (nothing wrapped, the step left to the precision).
    """

    name: str
    distributed_type: str | None = None
    platforms: Sequence[str] | None = None
    precisions: Sequence[str] | None = None
    needs_multiple_processes: bool = False
    automatic: bool = False
    config_section: str | None = None
    accelerator_arguments: Sequence[str] = ()
    composes_arguments: Sequence[str] = ()
    places_models: bool = False
    hooks: LazyRef | None = None
    description: str = ""


@frozen_record
class PrecisionSpec(FrozenRecord):
    """A mixed-precision mode (``fp16``, ``bf16``, ``fp8``) offered by a plugin.

    Several plugins may offer the same name (fp8 through Transformer Engine, MS-AMP or
    torchao); ``backend`` tells them apart and ``priority`` orders them.

    Attributes:
        name: the ``mixed_precision`` value users write.
        backend: which implementation this is; users may pin it (``fp8_backend: te``).
        platforms: platform names it works on, or ``None`` for any.
        probe: checks that the implementation can run here (a library, a device feature).
        hooks: lazy reference to this precision's class, a subclass of
            :class:`drivetrain.plugin_api.Precision` (API 2.0): each run that chooses it builds
            one object, ``cls(run, spec)``, which the strategy owns or replaces
            (``Strategy.own_precision``) before it is ``run.precision``. ``None``: the plain
            ``Precision`` (nothing converted, no autocast).
    """

    name: str
    backend: str = "native"
    platforms: Sequence[str] | None = None
    probe: Callable[[], Probe] = field(default_factory=lambda: _always("always available"))
    priority: int = 0
    hooks: LazyRef | None = None
    description: str = ""


@frozen_record
class TrackerSpec(FrozenRecord):
    """An experiment tracker, returned by ``drivetrain_register_trackers``.

    Attributes:
        name: what users pass to ``log_with`` (``"tensorboard"``).
        factory: lazy reference to the :class:`drivetrain.tracking.GeneralTracker`
            subclass.
        requires_logging_directory: the tracker needs ``project_dir``/``logging_dir``.
    """

    name: str
    factory: LazyRef
    requires_logging_directory: bool = False
    description: str = ""


@frozen_record
class LauncherSpec(FrozenRecord):
    """A way ``drivetrain launch`` starts processes (torchrun, DeepSpeed's launcher, ...).

    Attributes:
        name: the launcher's name.
        factory: lazy reference to a callable ``launch(args, command) -> int`` that runs the
            job and returns its exit code.
        applies: callable ``applies(args) -> bool`` telling whether this launcher should
            run the job described by the parsed launch arguments (merged with the config).
        priority: among launchers that apply, the highest priority runs the job.
        command_prefix: lazy reference to a callable ``prefix(args, env) -> list[str]`` for a
            launcher that is one command starting every process (``mpirun ...``): the words put
            before a process's command line in ``prepare_simple_launcher_cmd_env`` (``env`` is
            the environment the command runs with); ``None`` otherwise.
    """

    name: str
    factory: LazyRef
    applies: Callable[[Any], bool] = lambda args: True
    priority: int = 0
    description: str = ""
    command_prefix: LazyRef | None = None


@frozen_record
class ConfigField(FrozenRecord):
    """One key of a configuration section.

    Attributes:
        name: the key as written in the file (``fsdp_sharding_strategy``).
        type: ``str``, ``int``, ``float``, ``bool``, ``list`` or ``dict``; ``object`` accepts
            any value the file holds (a key that is a boolean in some files and a name in
            others), which the owning plugin checks when it reads it.
        default: value when absent.
        choices: allowed values (compared case-insensitively for strings), or ``None``.
        help: one line, also the question text of ``drivetrain config``.
        env: environment variable that overrides the file (``FSDP_SHARDING_STRATEGY``).
        ask: ask this in the interactive ``drivetrain config`` questionnaire.
        needs_library: ``False`` for a key that only describes something a command of the
            plugin reads without the plugin's library (a TPU pod's name, read by ``tpu-config``
            on a workstation): a file holding it loads where that library is missing. Keys
            that turn a feature on keep the default, ``True``, and are refused there.
    """

    name: str
    type: type = str
    default: Any = None
    choices: Sequence[Any] | None = None
    help: str = ""
    env: str | None = None
    ask: bool = False
    needs_library: bool = True


@frozen_record
class ConfigSection(FrozenRecord):
    """A block of the config file owned by a plugin (``fsdp_config:``, ``deepspeed_config:``).

    Attributes:
        key: the top-level key of the block, or ``""`` for top-level keys the plugin owns
            directly (a platform's ``gpu_ids``).
        fields: its keys; any other key in the block is an error naming the allowed ones.
        enabled_when: the ``distributed_type`` (upper case) or other top-level value that
            makes the questionnaire ask this block's questions, or ``None`` to always ask.
        allow_unknown: accept keys not in ``fields`` (for free-form blocks such as a
            tracker's init kwargs).
    """

    key: str
    fields: Sequence[ConfigField] = ()
    enabled_when: str | None = None
    allow_unknown: bool = False
    description: str = ""


@frozen_record
class EnvReportLine(FrozenRecord):
    """One line of ``drivetrain env``."""

    key: str
    value: str


#: The classes whose Accelerate attributes of a backend a plugin may declare.
ATTRIBUTE_OWNERS = ("Accelerator", "AcceleratorState", "GradientState")


@frozen_record
class BackendAttribute(FrozenRecord):
    """An attribute of ``Accelerator``, ``AcceleratorState`` or ``GradientState`` that belongs to
    a backend (Accelerate's ``accelerator.is_fsdp2``, ``state.deepspeed_plugin``), declared by a
    plugin through ``drivetrain_register_backend_attributes`` (API 2.0).

    The core installs one descriptor per declaration on the owner class
    (:mod:`drivetrain.runtime.backend_attributes`), so ``Accelerator.is_fsdp2`` exists, says who
    declared it, and reads, in order: what an active plugin's run extension answers for
    ``name`` (``drivetrain_configure_run``), the backend argument of that name given to the
    constructor (``fsdp_plugin=``), then ``unused``.

    Attributes:
        owner: ``"Accelerator"``, ``"AcceleratorState"`` or ``"GradientState"``.
        name: the attribute's name (public: no leading underscore).
        unused: what it reads while no active plugin answers it and no argument gave it
            (``None``, ``False``, or a function that raises the error that says what to do).
        description: one line for the table of declared attributes.
    """

    owner: str
    name: str
    unused: Any = None
    description: str = ""
