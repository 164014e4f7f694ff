"""Decides, once per process, which plugins run this job: platform, cluster environment,
strategy and precision ("How a run is chosen" in docs/architecture.md).

1. Explicit choices win: arguments, then environment variables, then the config file. An
   unknown name fails with the installed names.
2. Otherwise the platform is detected: the usable one with the highest priority.
3. A sharding strategy is never picked by surprise: none for one process, the strategy
   marked ``automatic`` for several, unless the user asks for another.
4. Incompatible combinations fail here, before training starts.
5. ``drivetrain launch`` passes the resolved names to its children in ``DRIVETRAIN_*``
   variables, so every rank makes the same choice.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..kernel import environment
from ..kernel.cluster import SINGLE_PROCESS, ClusterEnvironment
from .detection import Candidate, ask, best, probe_all
from ..kernel.errors import IncompatibleChoiceError, PluginSelectionError
from ..kernel.descriptors import PlatformSpec, PrecisionSpec, StrategySpec
from ..kernel.plugin_manager import (
    BLOCK_VARIABLE,
    EXPLICIT_PLUGINS_VARIABLE,
    REPORTED_VARIABLE,
    PluginManager,
    PluginStatus,
)

logger = logging.getLogger(__name__)

NO_PRECISION = ("no", "none", "fp32", "")
#: The platform ``cpu=True`` / ``--cpu`` / ``use_cpu: true`` selects.
CPU_PLATFORM = "cpu"


@dataclass
class Requests:
    """What the user asked for, each field ``None`` when not asked."""

    platform: str | None = None
    cpu: bool | None = None
    strategy: str | None = None
    mixed_precision: str | None = None
    precision_backend: str | None = None

    def merged_over(self, lower: "Requests") -> "Requests":
        """These requests, with ``lower`` filling what these leave unset."""
        return Requests(**{
            name: getattr(self, name) if getattr(self, name) is not None else getattr(lower, name)
            for name in self.__dataclass_fields__
        })


def requests_from_env(manager: PluginManager, env: Mapping[str, str] | None = None) -> Requests:
    """Read ``DRIVETRAIN_*`` (and ``ACCELERATE_*``) variables.

    ``DRIVETRAIN_USE_<NAME>=true`` selects the strategy or platform ``name`` (so Accelerate's
    ``ACCELERATE_USE_<NAME>`` works unchanged for any a plugin offers); one that names nothing
    installed is an error (see :mod:`drivetrain.use_variables`).
    """
    from .backend_variables import use_requests

    use_strategy, use_platform = use_requests(manager, env)  # an error when one names nothing installed
    strategy = environment.read("STRATEGY", env=env) or use_strategy
    variables = os.environ if env is None else env
    cpu_given = any(name in variables for name in environment.names_of("USE_CPU"))
    return Requests(
        platform=environment.read("PLATFORM", env=env) or use_platform,
        cpu=environment.read_bool("USE_CPU", env=env) if cpu_given else None,
        strategy=strategy,
        mixed_precision=environment.read("MIXED_PRECISION", env=env),
        precision_backend=environment.read("PRECISION_BACKEND", env=env),
    )


def strategy_for_distributed_type(manager: PluginManager, distributed_type: str | None) -> str | None:
    """The strategy a config file's ``distributed_type`` names (``FSDP`` -> ``fsdp``), if any."""
    if not distributed_type:
        return None
    for _plugin, spec in manager.registrations("drivetrain_register_strategies"):
        if not spec.automatic and spec.distributed_type and spec.distributed_type.upper() == distributed_type.upper():
            return spec.name
    return None


def platform_for_distributed_type(manager: PluginManager, distributed_type: str | None) -> str | None:
    """The platform a config file's ``distributed_type`` names, if any: the one whose
    ``multi_process_type`` (or single-process type other than ``NO``) it is. ``MULTI_CPU``
    names the cpu platform; a strategy's type (``FSDP``) names none."""
    if not distributed_type or distributed_type.upper() == "NO":
        return None
    wanted = distributed_type.upper()
    for _plugin, spec in manager.registrations("drivetrain_register_platforms"):
        if wanted in (str(spec.multi_process_type).upper(), str(spec.single_process_type).upper()):
            return spec.name
    return None


def _composing_strategy(manager: PluginManager, named: str | None, config: Any) -> str | None:
    """``named``, or the strategy that composes it when the file fills that strategy's block.

    A file written for Accelerate names the sharding strategy in ``distributed_type`` and
    adds the block of a layout built on top of it (a device mesh that shards with the named
    strategy). The strategy owning the block runs the job when its ``composes_arguments``
    cover the named strategy's arguments.
    """
    if named is None:
        return None
    specs = [spec for _plugin, spec in manager.registrations("drivetrain_register_strategies")]
    arguments = {argument for spec in specs if spec.name == named for argument in spec.accelerator_arguments}
    sections = getattr(config, "sections", None) or {}
    composing = [spec.name for spec in specs
                 if spec.name != named and spec.config_section and sections.get(spec.config_section)
                 and arguments and arguments & set(spec.composes_arguments)]
    return composing[0] if len(composing) == 1 else named


def _implied_platform(manager: PluginManager, distributed_type: str | None) -> str | None:
    """The platform a file's ``distributed_type`` implies, when it is usable here.

    Accelerate runs a ``MULTI_GPU`` file on CPU processes where torch sees no GPU (CI
    harnesses ship one such file for every machine), as ``--multi_gpu`` does on the command
    line; so a platform only implied, not named by ``platform:``, that cannot run here gives
    way to detection with one warning."""
    implied = platform_for_distributed_type(manager, distributed_type)
    if implied is None:
        return None
    candidates = probe_all(manager, "drivetrain_register_platforms", "platform", only=implied)
    if any(candidate.available for candidate in candidates):
        return implied
    reason = next((candidate.reason for candidate in candidates), "it is not installed")
    logger.warning("the config file's distributed_type %s implies platform %r, but %s; running on the "
                   "detected platform instead", distributed_type, implied, reason)
    return None


def requests_from_config(manager: PluginManager, config: Any) -> Requests:
    """What a config file asks for (the weakest explicit choice: arguments and variables win)."""
    if config is None:
        return Requests()
    kind = config.distributed_type
    return Requests(
        platform=config.platform or _implied_platform(manager, kind),
        cpu=True if config.use_cpu else None,
        strategy=config.strategy or _composing_strategy(manager, strategy_for_distributed_type(manager, kind), config),
        mixed_precision=config.mixed_precision if config.mixed_precision not in (None, "no") else None,
        precision_backend=config.precision_backend,
    )


@dataclass
class Selection:
    """The plugins chosen for this process, and why."""

    platform: PlatformSpec
    platform_plugin: str
    cluster: ClusterEnvironment
    cluster_plugin: str | None
    strategy: StrategySpec | None = None
    strategy_plugin: str | None = None
    precision: PrecisionSpec | None = None
    precision_plugin: str | None = None
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def mixed_precision(self) -> str:
        return self.precision.name if self.precision else "no"

    @property
    def distributed_type(self) -> str:
        if self.strategy is not None and self.strategy.distributed_type:
            return self.strategy.distributed_type
        if self.cluster.world_size > 1:
            return self.platform.multi_process_type
        return self.platform.single_process_type

    def plugin_names(self) -> list[str]:
        """The plugins active because of this selection, in role order."""
        names = [self.platform_plugin, self.platform.communication or self.platform_plugin,
                 self.cluster_plugin, self.strategy_plugin, self.precision_plugin]
        return list(dict.fromkeys(n for n in names if n))

    def child_environment(self) -> dict[str, str]:
        """Variables that make a child process choose exactly this (rule 5)."""
        env = {"DRIVETRAIN_PLATFORM": self.platform.name, "DRIVETRAIN_MIXED_PRECISION": self.mixed_precision,
               REPORTED_VARIABLE: "1"}  # the launcher already warned about broken plugins
        env["DRIVETRAIN_STRATEGY"] = self.strategy.name if self.strategy else "none"
        if self.precision is not None:
            env["DRIVETRAIN_PRECISION_BACKEND"] = self.precision.backend
        return env


def not_loaded_hint(manager: PluginManager, name: str | None = None) -> str:
    """Why something may be missing: plugins the user blocked, left out or that failed.

    A blocked plugin is never imported, so what it would offer is unknown; one named
    ``name`` (the ``cpu`` plugin offers the ``cpu`` platform) is named as the cause.
    """
    def named(status: PluginStatus) -> list[str]:
        return sorted(r.name for r in manager.records.values() if r.status is status)

    blocked, disabled, failed = named(PluginStatus.BLOCKED), named(PluginStatus.DISABLED), named(PluginStatus.FAILED)
    if name is not None and name.lower() in [b.lower() for b in blocked]:
        return f"plugin {name!r} provides it and is blocked by {BLOCK_VARIABLE}: remove {name!r} from {BLOCK_VARIABLE}"
    hints = []
    if blocked:
        hints.append(f"{BLOCK_VARIABLE} blocks {', '.join(blocked)}, which may provide it: remove it from "
                     f"{BLOCK_VARIABLE} to use it")
    if disabled:
        hints.append(f"third-party autoload is off for {', '.join(disabled)}: enable one with "
                     f"{EXPLICIT_PLUGINS_VARIABLE}=NAME")
    if failed:
        hints.append(f"{', '.join(failed)} failed to load (`drivetrain plugins list` shows why)")
    return "; ".join(hints)


def _plural(kind: str) -> str:
    return kind[:-1] + "ies" if kind.endswith("y") else kind + "s"


def _named(manager: PluginManager, hook: str, kind: str, name: str) -> list[tuple[str, Any]]:
    """The descriptors called ``name``; an error naming the installed ones when there is none."""
    pairs = manager.registrations(hook)
    found = [(p, spec) for p, spec in pairs if spec.name.lower() == name.lower()]
    if not found:
        known = ", ".join(sorted({spec.name for _p, spec in pairs})) or "none"
        hint = not_loaded_hint(manager, name)
        if hint:
            raise PluginSelectionError(f"no loaded plugin offers the {kind} {name!r}: {hint} (loaded: {known})")
        raise PluginSelectionError(f"unknown {kind} {name!r}; installed {_plural(kind)}: {known}")
    return found


def require_communication(manager: PluginManager, platform: PlatformSpec, platform_plugin: str,
                          world_size: int) -> str:
    """The plugin that connects the processes of a multi-process run, or an error before any
    training: without one each process would compute alone and collectives would silently
    return local values."""
    name = platform.communication or platform_plugin
    what = f"{world_size} processes on platform {platform.name!r} need plugin {name!r} to connect them"
    record = manager.records.get(name)
    if record is None:
        raise PluginSelectionError(f"{what}, but it is not installed; reinstall the plugin of platform "
                                   f"{platform.name!r} or run one process")
    if record.status is PluginStatus.BLOCKED:
        raise PluginSelectionError(f"{what}, but it is blocked by {BLOCK_VARIABLE}: remove {name!r} from "
                                   f"{BLOCK_VARIABLE}, or run one process")
    if not record.usable:
        raise PluginSelectionError(f"{what}, but it cannot be used: {record.reason}")
    if "drivetrain_collectives" not in record.hooks:
        raise PluginSelectionError(f"{what}, but it offers no collectives (drivetrain_collectives); "
                                   "run one process or choose another platform")
    return name


def _require_usable(manager: PluginManager, plugin: str, kind: str, name: str) -> None:
    record = manager.records[plugin]
    if not record.usable:
        raise PluginSelectionError(f"{kind} {name!r} (plugin {plugin!r}) cannot be used: {record.reason}")


def choose_platform(manager: PluginManager, requests: Requests) -> tuple[Candidate, str]:
    wanted = CPU_PLATFORM if requests.cpu else requests.platform
    platforms = probe_all(manager, "drivetrain_register_platforms", "platform", only=wanted)
    if wanted:
        _named(manager, "drivetrain_register_platforms", "platform", wanted)
        for candidate in platforms:
            if candidate.name.lower() == wanted.lower():
                _require_usable(manager, candidate.plugin, "platform", wanted)
                if candidate.available:
                    return candidate, "requested"
                raise PluginSelectionError(
                    f"platform {wanted!r} was requested but is not usable here: {candidate.reason}"
                )
    winner = _startable(manager, platforms)
    if winner is None:
        hint = not_loaded_hint(manager)
        raise PluginSelectionError("no platform is usable; " + (hint or "install a platform plugin or check "
                                                                 "`drivetrain plugins list --detect`"))
    return winner, f"detected (priority {winner.priority}): {winner.reason}"


def _startable(manager: PluginManager, platforms: list[Candidate]) -> Candidate | None:
    """The detected platform, built once to see that it starts: one that cannot is skipped
    with a warning naming its plugin, and the next one by priority (at last the CPU) runs
    the job. A platform the user names is not skipped: building it fails with the fix."""
    while True:
        winner = best(platforms)
        if winner is None:
            return None
        try:
            manager.construct(winner.plugin, winner.spec, f"platform {winner.name!r}")
        except Exception as exc:
            winner.available, winner.reason = False, f"cannot start: {exc}"
            following = best(platforms)
            manager.warn(f"skipped the detected platform {winner.name!r} (plugin {winner.plugin!r}), "
                         f"{repr(following.name) if following else 'no platform'} runs instead: {exc}")
            continue
        return winner


def choose_cluster(manager: PluginManager, env: Mapping[str, str] | None = None
                   ) -> tuple[ClusterEnvironment, str | None, str]:
    """The cluster environment of this process: the one named by ``DRIVETRAIN_CLUSTER_ENVIRONMENT``
    (``none`` for a single process), else the detected one with the highest priority."""
    candidates = probe_all(manager, "drivetrain_register_cluster_environments", "cluster-environment")
    wanted = environment.read("CLUSTER_ENVIRONMENT", env=env)
    if wanted and wanted.lower() in ("none", "no", "single"):
        return SINGLE_PROCESS, None, "requested: one process"
    if wanted:
        _named(manager, "drivetrain_register_cluster_environments", "cluster environment", wanted)
        winner = next(c for c in candidates if c.name.lower() == wanted.lower())
        _require_usable(manager, winner.plugin, "cluster environment", wanted)
        if not winner.available:
            raise PluginSelectionError(
                f"cluster environment {wanted!r} was requested but this process was not started by it: {winner.reason}"
            )
        reason = f"requested: {winner.reason}"
    else:
        winner = best(candidates)
        if winner is None:
            return SINGLE_PROCESS, None, "no launcher variables: one process"
        reason = f"detected: {winner.reason}"
    environment_ = manager.construct(winner.plugin, winner.spec, f"cluster environment {winner.name!r}")
    return environment_, winner.plugin, reason


def choose_strategy(
    manager: PluginManager, requests: Requests, platform: PlatformSpec, world_size: int
) -> tuple[StrategySpec | None, str | None, str]:
    wanted = requests.strategy
    if wanted and wanted.lower() not in ("none", "no"):
        plugin, spec = _named(manager, "drivetrain_register_strategies", "strategy", wanted)[0]
        _require_usable(manager, plugin, "strategy", wanted)
        if spec.platforms is not None and platform.name not in spec.platforms:
            raise IncompatibleChoiceError(
                f"strategy {spec.name!r} does not run on platform {platform.name!r} "
                f"(it supports {', '.join(spec.platforms)}); choose another strategy or platform"
            )
        return spec, plugin, "requested"
    if wanted:
        return None, None, "requested: no strategy"
    if world_size <= 1:
        return None, None, "one process: no strategy"
    for plugin, spec in manager.registrations("drivetrain_register_strategies", usable_only=True):
        if spec.automatic and (spec.platforms is None or platform.name in spec.platforms):
            return spec, plugin, f"{world_size} processes: the automatic strategy"
    raise PluginSelectionError(
        f"{world_size} processes but no installed strategy runs on platform {platform.name!r}; "
        + (not_loaded_hint(manager) or "reinstall drivetrain")
    )


def choose_precision(
    manager: PluginManager, requests: Requests, platform: PlatformSpec, strategy: StrategySpec | None
) -> tuple[PrecisionSpec | None, str | None, str]:
    wanted = (requests.mixed_precision or "no").lower()
    if wanted in NO_PRECISION:
        return None, None, "full precision"
    candidates = _named(manager, "drivetrain_register_precisions", "mixed precision", wanted)
    if requests.precision_backend:
        candidates = [(p, s) for p, s in candidates if s.backend.lower() == requests.precision_backend.lower()]
        if not candidates:
            raise PluginSelectionError(
                f"no installed plugin offers mixed precision {wanted!r} with backend {requests.precision_backend!r}"
            )
    for limits, owner in ((platform.precisions, f"platform {platform.name!r}"),
                          (strategy.precisions if strategy else None, f"strategy {strategy.name!r}" if strategy else "")):
        if limits is not None and wanted not in limits:
            raise IncompatibleChoiceError(
                f"mixed precision {wanted!r} is not supported by {owner} (it supports {', '.join(limits) or 'none'}); "
                f"pass mixed_precision={(list(limits) or ['no'])[0]!r} or 'no'"
            )
    # A backend that cannot run on this platform is not worth installing here: those that can
    # are listed first, with what each needs (the extra to install, a newer device).
    problems, elsewhere = [], []
    for plugin, spec in sorted(candidates, key=lambda pair: -pair[1].priority):
        record = manager.records[plugin]
        if spec.platforms is not None and platform.name not in spec.platforms:
            if requests.precision_backend:  # asked for by name: all it needs
                problems.append(f"{spec.backend}: runs only on {', '.join(spec.platforms)}"
                                + ("" if record.usable else f"; {record.reason}"))
            else:
                elsewhere.append(f"{spec.backend} ({', '.join(spec.platforms)})")
            continue
        if not record.usable:
            install = record.install if record.install and record.install not in record.reason else ""
            problems.append(f"{spec.backend}: {record.reason}" + (f"; {install}" if install else ""))
            continue
        answer = ask(manager, plugin, spec.probe)
        if not answer.available:
            problems.append(f"{spec.backend}: {answer.reason}")
            continue
        return spec, plugin, f"requested ({spec.backend})"
    message = f"mixed precision {wanted!r} cannot run on platform {platform.name!r}: "
    message += ("; ".join(problems) if problems else f"no installed backend of it runs on {platform.name}")
    if elsewhere:
        message += f"; backends for other platforms only: {', '.join(elsewhere)}"
    raise IncompatibleChoiceError(message + f"; or choose another mixed precision ('no' for full precision)")


def select(manager: PluginManager, requests: Requests, cluster: ClusterEnvironment | None = None) -> Selection:
    """Make every choice for this process; raise before training when one is impossible.

    ``cluster`` replaces detection of the cluster environment: the launcher passes the job
    it is about to start, so that it resolves the same choice its children will.
    """
    platform, platform_reason = choose_platform(manager, requests)
    if cluster is None:
        cluster, cluster_plugin, cluster_reason = choose_cluster(manager)
    else:
        cluster_plugin, cluster_reason = None, f"the job being launched: {cluster.world_size} processes"
    if cluster.world_size > 1:
        require_communication(manager, platform.spec, platform.plugin, cluster.world_size)
    strategy, strategy_plugin, strategy_reason = choose_strategy(manager, requests, platform.spec, cluster.world_size)
    precision, precision_plugin, precision_reason = choose_precision(manager, requests, platform.spec, strategy)
    return Selection(
        platform=platform.spec,
        platform_plugin=platform.plugin,
        cluster=cluster,
        cluster_plugin=cluster_plugin,
        strategy=strategy,
        strategy_plugin=strategy_plugin,
        precision=precision,
        precision_plugin=precision_plugin,
        reasons={"platform": platform_reason, "cluster": cluster_reason, "strategy": strategy_reason,
                 "precision": precision_reason},
    )

