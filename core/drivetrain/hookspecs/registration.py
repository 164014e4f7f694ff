"""Registration hooks: what a plugin offers, asked once per process of every loaded plugin.

Part of :mod:`drivetrain.hookspecs`, which collects every family; read its docstring for the
kinds of hook and the calling conventions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from ..kernel.descriptors import hookspec

if TYPE_CHECKING:  # pragma: no cover - names for the type hints only
    from ..kernel.descriptors import (
        BackendAttribute,
        ClusterEnvironmentSpec,
        ConfigSection,
        EnvReportLine,
        LauncherSpec,
        PlatformSpec,
        PrecisionSpec,
        StrategySpec,
        TrackerSpec,
    )


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
def drivetrain_register_backend_attributes() -> Sequence[BackendAttribute] | None:
    """Declare Accelerate's attributes of a backend on ``Accelerator``, ``AcceleratorState``
    or ``GradientState`` (``accelerator.is_fsdp2``, ``state.deepspeed_plugin``).

    The core names no backend, so these attributes are not written in its classes: each
    declaration becomes a descriptor on its owner class when the plugins are loaded
    (:mod:`drivetrain.runtime.backend_attributes`), and ``Accelerator.is_fsdp2`` then says
    which plugin declared it. It reads what an active plugin's run extension answers for
    the name (:func:`drivetrain_configure_run`), else the constructor's backend argument of
    that name, else the declaration's ``unused`` value. A name no plugin declares is an
    ``AttributeError``, as for any attribute; ``docs/architecture.md`` lists the built-in
    declarations.

    :return: :class:`~drivetrain.plugin_api.BackendAttribute` items; the first plugin to
        declare an ``owner.name`` keeps it. ``None`` for none.

    Registration hook, *collected*, API 2.0.
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
