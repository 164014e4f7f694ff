"""Finds, checks and loads plugins, one entry point at a time, and remembers what happened.

Every plugin, built-in or not, is an entry point in the ``drivetrain.plugins`` group. Each is
loaded on its own so that one broken plugin is recorded and skipped instead of breaking the
program (pluggy's own loader stops at the first failure). Nothing here imports torch.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Iterable, Mapping

import pluggy
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from . import hookspecs
from .errors import PluginLoadError, PluginSelectionError, PluginWarning
from .plugin_api import PROJECT_NAME, PluginInfo
from .version import PLUGIN_API_VERSION

if sys.version_info >= (3, 12):  # pragma: no cover
    from importlib import metadata as importlib_metadata
else:  # pragma: no cover
    import importlib_metadata

ENTRY_POINT_GROUP = "drivetrain.plugins"
CORE_DISTRIBUTION = "drivetrain"

BLOCK_VARIABLE = "DRIVETRAIN_BLOCK_PLUGINS"
NO_AUTOLOAD_VARIABLE = "DRIVETRAIN_DISABLE_PLUGIN_AUTOLOAD"
EXPLICIT_PLUGINS_VARIABLE = "DRIVETRAIN_PLUGINS"
STRICT_VARIABLE = "DRIVETRAIN_STRICT_PLUGINS"

# Registration hooks whose non-empty answer says what kind of plugin this is.
KIND_OF_HOOK = {
    "drivetrain_register_platforms": "platform",
    "drivetrain_register_cluster_environments": "cluster-environment",
    "drivetrain_register_strategies": "strategy",
    "drivetrain_register_precisions": "precision",
    "drivetrain_register_trackers": "tracker",
    "drivetrain_register_launchers": "launcher",
    "drivetrain_register_config_sections": "config",
}


class PluginStatus(str, Enum):
    """Where a plugin stands. ``str`` so that it prints and serialises as its value."""

    ACTIVE = "active"  # loaded and used by the current run (or selected by the config)
    AVAILABLE = "available"  # loaded, its requirements are met, not in use
    UNAVAILABLE = "unavailable"  # loaded, but a library it needs is missing
    BLOCKED = "blocked"  # named in DRIVETRAIN_BLOCK_PLUGINS, never imported
    DISABLED = "disabled"  # third-party while autoload is off, never imported
    FAILED = "failed"  # import error, bad hook, incompatible API, duplicate name

    def __str__(self) -> str:
        return self.value


@dataclass
class PluginRecord:
    """Everything known about one plugin; one row of ``drivetrain plugins list``."""

    name: str
    distribution: str
    version: str
    source: str  # "built-in" or "third-party"
    entry_point: str
    status: PluginStatus
    reason: str = ""
    description: str = ""
    api_version: str | None = None
    kinds: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    install: str | None = None  # command that makes an unavailable plugin available

    @property
    def usable(self) -> bool:
        return self.status in (PluginStatus.ACTIVE, PluginStatus.AVAILABLE)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        return data


def _env_flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _env_names(env: Mapping[str, str], name: str) -> set[str]:
    return {part.strip() for part in env.get(name, "").split(",") if part.strip()}


def api_version_problem(declared: str, offered: str = PLUGIN_API_VERSION) -> str | None:
    """Why a plugin written for API ``declared`` cannot run on ``offered``, or ``None``."""
    try:
        want, have = Version(declared), Version(offered)
    except InvalidVersion:
        return f"declares plugin API version {declared!r}, which is not a version number like '1.0'"
    if want.major != have.major or want.minor > have.minor:
        if (want.major, want.minor) > (have.major, have.minor):
            return (
                f"needs plugin API {declared} but this drivetrain offers {offered}: "
                "upgrade drivetrain (pip install -U drivetrain)"
            )
        return (
            f"was written for plugin API {declared} but this drivetrain offers {offered}: "
            "upgrade the plugin"
        )
    return None


def missing_requirements(requires: Iterable[str]) -> list[str]:
    """The requirement strings that the installed distributions do not satisfy."""
    missing = []
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            missing.append(f"{text} (not a valid requirement)")
            continue
        try:
            installed = importlib_metadata.version(requirement.name)
        except importlib_metadata.PackageNotFoundError:
            missing.append(f"{requirement.name} (not installed)")
            continue
        if requirement.specifier and not requirement.specifier.contains(installed, prereleases=True):
            missing.append(f"{requirement} (found {installed})")
    return missing


class PluginManager:
    """drivetrain's plugin manager: pluggy underneath, with a record for every plugin.

    Args:
        env: the environment variables to read the controls from (``os.environ``).
        entry_points: the entry points to load; by default those installed in the
            ``drivetrain.plugins`` group. Tests pass their own.
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        entry_points: Iterable[Any] | None = None,
    ) -> None:
        self.env = os.environ if env is None else env
        self.hooks = pluggy.PluginManager(PROJECT_NAME)
        self.hooks.add_hookspecs(hookspecs)
        self.records: dict[str, PluginRecord] = {}
        self.modules: dict[str, Any] = {}
        self.infos: dict[str, PluginInfo] = {}
        self._entry_points = entry_points
        self._registrations: dict[str, dict[str, list[Any]]] = {}
        self._loaded = False

    # ---------------------------------------------------------------- loading

    def load(self) -> PluginManager:
        """Load every plugin once. Safe to call again: later calls do nothing."""
        if self._loaded:
            return self
        self._loaded = True
        entry_points = self._entry_points
        if entry_points is None:
            entry_points = importlib_metadata.entry_points(group=ENTRY_POINT_GROUP)
        blocked = _env_names(self.env, BLOCK_VARIABLE)
        no_autoload = _env_flag(self.env, NO_AUTOLOAD_VARIABLE)
        explicit = _env_names(self.env, EXPLICIT_PLUGINS_VARIABLE)
        # Built-ins first, so a third-party plugin cannot shadow a built-in name.
        ordered = sorted(entry_points, key=lambda ep: (self._source_of(ep) != "built-in", ep.name))
        for entry_point in ordered:
            self._load_one(entry_point, blocked, no_autoload, explicit)
        for name in sorted(explicit - set(self.records)):
            self._warn(name, f"DRIVETRAIN_PLUGINS names {name!r}, but no installed plugin has that name")
        self._collect_registrations()
        failed = [r for r in self.records.values() if r.status is PluginStatus.FAILED]
        if failed and _env_flag(self.env, STRICT_VARIABLE):
            details = "; ".join(f"{r.name}: {r.reason}" for r in failed)
            raise PluginLoadError(
                f"{len(failed)} plugin(s) failed to load and {STRICT_VARIABLE}=1: {details}"
            )
        return self

    @staticmethod
    def _source_of(entry_point: Any) -> str:
        dist = getattr(entry_point, "dist", None)
        dist_name = getattr(dist, "name", None) or getattr(dist, "metadata", {}).get("Name", "")
        if (dist_name or "").replace("_", "-").lower() == CORE_DISTRIBUTION:
            return "built-in"
        return "third-party"

    def _load_one(self, entry_point: Any, blocked: set[str], no_autoload: bool, explicit: set[str]) -> None:
        dist = getattr(entry_point, "dist", None)
        record = PluginRecord(
            name=entry_point.name,
            distribution=getattr(dist, "name", None) or "?",
            version=getattr(dist, "version", None) or "?",
            source=self._source_of(entry_point),
            entry_point=entry_point.value,
            status=PluginStatus.AVAILABLE,
        )
        if record.name in self.records:
            first = self.records[record.name]
            record.name = f"{record.name} ({record.distribution})"
            self._fail(
                record,
                f"duplicate plugin name {entry_point.name!r}: {first.distribution} already provides it; "
                f"uninstall one of them or block it with {BLOCK_VARIABLE}={entry_point.name}",
            )
            return
        self.records[record.name] = record
        if record.name in blocked:
            record.status = PluginStatus.BLOCKED
            record.reason = f"blocked by {BLOCK_VARIABLE}"
            return
        if record.source == "third-party" and no_autoload and record.name not in explicit:
            record.status = PluginStatus.DISABLED
            record.reason = (
                f"third-party autoload is off ({NO_AUTOLOAD_VARIABLE}=1); "
                f"enable it with {EXPLICIT_PLUGINS_VARIABLE}={record.name}"
            )
            return
        try:
            module = entry_point.load()
        except BaseException as exc:  # a plugin's import may raise anything, SystemExit included
            if isinstance(exc, KeyboardInterrupt):
                raise
            self._fail(record, f"import failed: {type(exc).__name__}: {exc}")
            return
        info = getattr(module, "PLUGIN_INFO", None)
        if not isinstance(info, PluginInfo):
            self._fail(record, "declares no PLUGIN_INFO = drivetrain.plugin_api.PluginInfo(...); add one")
            return
        record.api_version = info.api_version
        record.description = info.description
        problem = api_version_problem(info.api_version)
        if problem:
            self._fail(record, problem)
            return
        problem = self._hook_problem(module)
        if problem:
            self._fail(record, problem)
            return
        self.hooks.register(module, name=record.name)
        self.modules[record.name] = module
        self.infos[record.name] = info
        record.hooks = sorted(
            impl_name for impl_name in dir(module) if self.hooks.parse_hookimpl_opts(module, impl_name)
        )
        missing = missing_requirements(info.requires)
        if missing:
            record.status = PluginStatus.UNAVAILABLE
            record.install = info.how_to_install()
            record.reason = f"needs {', '.join(missing)}: {record.install}"

    def _hook_problem(self, module: Any) -> str | None:
        """Validate a module's hooks on a scratch manager, so the real one never sees a bad one."""
        scratch = pluggy.PluginManager(PROJECT_NAME)
        scratch.add_hookspecs(hookspecs)
        try:
            scratch.register(module)
        except pluggy.PluginValidationError as exc:
            return f"bad hook implementation: {exc}"
        except Exception as exc:
            return f"cannot register: {type(exc).__name__}: {exc}"
        for hook_name in dir(module):
            if scratch.parse_hookimpl_opts(module, hook_name) is None:
                continue
            caller = getattr(scratch.hook, hook_name, None)
            if caller is None or not caller.has_spec():
                return f"implements unknown hook {hook_name!r} (misspelt, or needs a newer drivetrain)"
        return None

    def _fail(self, record: PluginRecord, reason: str) -> None:
        record.status = PluginStatus.FAILED
        record.reason = reason
        self.records.setdefault(record.name, record)
        self._warn(record.name, reason)

    @staticmethod
    def _warn(name: str, reason: str) -> None:
        warnings.warn(f"drivetrain plugin {name!r} skipped: {reason}", PluginWarning, stacklevel=3)

    # ------------------------------------------------------------ registration

    def _collect_registrations(self) -> None:
        """Call every registration hook once, plugin by plugin, keeping who said what."""
        for hook_name in ("drivetrain_public_names", "drivetrain_fallback_names", "drivetrain_distributed_types",
                          "drivetrain_enum_members", *KIND_OF_HOOK):
            caller = getattr(self.hooks.hook, hook_name)
            for impl in caller.get_hookimpls():
                record = self.records[impl.plugin_name]
                if record.status is PluginStatus.FAILED:
                    continue
                try:
                    answer = impl.function()
                except Exception as exc:
                    self._unregister_failed(record, f"{hook_name} raised {type(exc).__name__}: {exc}")
                    continue
                if not answer:
                    continue
                self._registrations.setdefault(hook_name, {})[record.name] = (
                    answer if isinstance(answer, dict) else list(answer)
                )
                kind = KIND_OF_HOOK.get(hook_name)
                if kind and kind not in record.kinds:
                    record.kinds.append(kind)

    def _unregister_failed(self, record: PluginRecord, reason: str) -> None:
        module = self.modules.pop(record.name, None)
        if module is not None:
            self.hooks.unregister(module)
        for by_plugin in self._registrations.values():
            by_plugin.pop(record.name, None)
        self._fail(record, reason)

    def registrations(self, hook_name: str, *, usable_only: bool = False) -> list[tuple[str, Any]]:
        """``(plugin name, descriptor)`` pairs a registration hook returned, in load order."""
        self.load()
        pairs = []
        for plugin_name, answer in self._registrations.get(hook_name, {}).items():
            if usable_only and not self.records[plugin_name].usable:
                continue
            items = answer.items() if isinstance(answer, dict) else answer
            pairs.extend((plugin_name, item) for item in items)
        return pairs

    # ---------------------------------------------------------------- queries

    def require(self, name: str, what: str = "plugin") -> Any:
        """The module of plugin ``name``, or an error that says why it cannot be used."""
        self.load()
        record = self.records.get(name)
        if record is None:
            known = ", ".join(sorted(self.records)) or "none"
            raise PluginSelectionError(f"unknown {what} {name!r}; installed plugins: {known}")
        if not record.usable:
            raise PluginSelectionError(f"{what} {name!r} cannot be used: {record.reason}")
        return self.modules[name]

    def mark_active(self, names: Iterable[str]) -> None:
        for name in names:
            record = self.records.get(name)
            if record is not None and record.status is PluginStatus.AVAILABLE:
                record.status = PluginStatus.ACTIVE

    def subset_caller(self, hook_name: str, active: Iterable[str]) -> pluggy.HookCaller:
        """A caller of ``hook_name`` that reaches only the plugins named in ``active``."""
        keep = set(active)
        others = [module for name, module in self.modules.items() if name not in keep]
        return self.hooks.subset_hook_caller(hook_name, others)


_default_manager: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager, loaded on first use."""
    global _default_manager
    if _default_manager is None:
        _default_manager = PluginManager().load()
    return _default_manager


def reset_plugin_manager(manager: PluginManager | None = None) -> None:
    """Replace the process-wide manager (tests, or after installing a plugin at run time)."""
    global _default_manager
    _default_manager = manager


def call_chain(caller: pluggy.HookCaller, value_name: str, value: Any, **kwargs: Any) -> Any:
    """Call a *chained* hook: each implementation gets the previous one's result.

    Implementations run in pluggy's order (tryfirst first); ``None`` keeps the value.
    """
    for impl in reversed(caller.get_hookimpls()):
        wanted = {name: arg for name, arg in kwargs.items() if name in impl.argnames}
        if value_name in impl.argnames:
            wanted[value_name] = value
        result = impl.function(**wanted)
        if result is not None:
            value = result
    return value

