"""Finds, checks and loads plugins, one entry point at a time, and remembers what happened.

Every plugin, built-in or not, is an entry point in the ``drivetrain.plugins`` group. Each is
loaded on its own so that one broken plugin is recorded and skipped instead of breaking the
program (pluggy's own loader stops at the first failure). Nothing here imports torch.
"""

from __future__ import annotations

import inspect
import os
import warnings
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Mapping

import pluggy

from .. import hookspecs
from . import plugin_guard, registration
from .errors import DrivetrainError, PluginHookError, PluginLoadError, PluginSelectionError, PluginWarning
from .descriptors import PROJECT_NAME, PluginInfo, resolve
from .hook_registry import HookRegistry
from . import installed
from .installed import (distribution_name_and_version, forget_versions, installed_version, missing_requirements,
                        release_numbers)
from .version import PLUGIN_API_VERSION

LOGGER_NAME = "drivetrain.plugin_manager"  # the logger name docs/plugins.md gives


def _log_debug(message: str, *args: Any) -> None:
    # logging is imported by the first message, not at start: `drivetrain plugins list` logs
    # nothing, and importing logging was a tenth of its time
    import logging

    logging.getLogger(LOGGER_NAME).debug(message, *args)

ENTRY_POINT_GROUP = "drivetrain.plugins"
CORE_DISTRIBUTION = "drivetrain"

BLOCK_VARIABLE = "DRIVETRAIN_BLOCK_PLUGINS"
NO_AUTOLOAD_VARIABLE = "DRIVETRAIN_DISABLE_PLUGIN_AUTOLOAD"
EXPLICIT_PLUGINS_VARIABLE = "DRIVETRAIN_PLUGINS"
STRICT_VARIABLE = "DRIVETRAIN_STRICT_PLUGINS"
#: Set by ``drivetrain launch`` for its children: the launcher already warned about the
#: plugins, so each rank keeps the same warnings at debug level instead of repeating them.
REPORTED_VARIABLE = "DRIVETRAIN_PLUGIN_PROBLEMS_REPORTED"

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
    PARTIAL = "partial"  # loaded and usable, but some of what it registered was refused
    UNAVAILABLE = "unavailable"  # loaded, but a library it needs is missing
    BLOCKED = "blocked"  # named in DRIVETRAIN_BLOCK_PLUGINS, never imported
    DISABLED = "disabled"  # third-party while autoload is off, never imported
    FAILED = "failed"  # import error, bad hook, incompatible API, duplicate name, nothing valid registered

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
        return self.status in (PluginStatus.ACTIVE, PluginStatus.AVAILABLE, PluginStatus.PARTIAL)

    def to_json(self) -> dict[str, Any]:
        # every field is a string, a list of strings or the status: no deep copy to make
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data.update(status=self.status.value, kinds=list(self.kinds), hooks=list(self.hooks))
        return data


def _env_flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _env_names(env: Mapping[str, str], name: str) -> set[str]:
    return {part.strip() for part in env.get(name, "").split(",") if part.strip()}


def api_version_problem(declared: str, offered: str = PLUGIN_API_VERSION) -> str | None:
    """Why a plugin written for API ``declared`` cannot run on ``offered``, or ``None``."""
    if not isinstance(declared, str):
        return f"declares plugin API version {declared!r}, which is not a version number like '1.0'"
    want, have = _major_minor(declared), _major_minor(offered)
    if want is None:
        return f"declares plugin API version {declared!r}, which is not a version number like '1.0'"
    if want[0] != have[0] or want[1] > have[1]:
        if want > have:
            return (
                f"needs plugin API {declared} but this drivetrain offers {offered}: "
                "upgrade drivetrain (pip install -U drivetrain)"
            )
        return (
            f"was written for plugin API {declared} but this drivetrain offers {offered}: "
            "upgrade the plugin"
        )
    return None


def plugin_info_problem(info: PluginInfo) -> str | None:
    """What is wrong with the types of a plugin's ``PLUGIN_INFO``, or ``None``.

    A third-party plugin's declaration is the first thing of it the core reads; a wrong
    type there (``api_version=1.5``) must refuse that plugin alone, never fail later in
    code that expects strings.
    """
    fix = "fix PLUGIN_INFO in the plugin or ask its author to"
    if not isinstance(info.api_version, str):
        return (f"declares plugin API version {info.api_version!r} ({type(info.api_version).__name__}), "
                f"which is not a string like '1.0': {fix}")
    for field in ("description", "extra", "install_hint"):
        value = getattr(info, field)
        if not (isinstance(value, str) or (value is None and field != "description")):
            return f"declares PluginInfo {field}={value!r}, which is not a string: {fix}"
    for field in ("requires", "features"):
        value = getattr(info, field)
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, frozenset, set)):
            return f"declares PluginInfo {field}={value!r}, which is not a list of strings: {fix}"
        odd = [item for item in value if not isinstance(item, str)]
        if odd:
            return f"declares PluginInfo {field} holding {odd[0]!r}, which is not a string: {fix}"
    if any("\x00" in text or "\n" in text for text in (info.api_version, info.description)):
        return f"declares a PluginInfo text with a line break or NUL character: {fix}"
    return None


def _major_minor(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version number (``"1.0"``, ``"1.2.3"``, ``"1.0rc1"``), or ``None``."""
    numbers = release_numbers(version)
    if numbers is not None and len(numbers) >= 2:  # the usual form, without packaging
        return numbers[0], numbers[1]
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Version(version)
    except InvalidVersion:
        return None
    return parsed.major, parsed.minor


def installed_entry_points(group: str = ENTRY_POINT_GROUP) -> list[Any]:
    """The entry points of ``group`` (by default the plugins'), as
    ``importlib.metadata.entry_points(group=group)`` finds them (see :mod:`.installed`)."""
    return installed.installed_entry_points(group)


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
        self.hooks = HookRegistry(PROJECT_NAME)
        self.hooks.add_hookspecs(hookspecs)
        self.records: dict[str, PluginRecord] = {}
        self.modules: dict[str, Any] = {}
        self.infos: dict[str, PluginInfo] = {}
        self._entry_points = entry_points
        self._registrations: dict[str, dict[str, list[Any]]] = {}
        self._refused: dict[str, list[str]] = {}  # plugin -> why each refused item was refused
        self._loaded = False
        # id(dist) -> (dist, name, version); the dist is kept so that its id stays its own
        self._distributions: dict[int, tuple[Any, str | None, str | None]] = {}
        self._scratch: pluggy.PluginManager | None = None
        self.timeout, timeout_problem = plugin_guard.timeout_from(self.env)
        if timeout_problem:
            self._notice(timeout_problem, once=True)

    # ---------------------------------------------------------------- loading

    def load(self, strict: bool | None = None) -> PluginManager:
        """Load every plugin once. Safe to call again: later calls do nothing.

        Problems are recorded on each plugin's record (``drivetrain plugins list``) and
        summed up in one :class:`PluginWarning`; the details are logged at debug level.
        With ``strict`` (default: ``DRIVETRAIN_STRICT_PLUGINS``) any problem then raises
        :class:`PluginLoadError` (see :meth:`raise_if_strict`).
        """
        if self._loaded:
            return self
        self._loaded = True
        entry_points = self._entry_points
        if entry_points is None:
            entry_points = installed_entry_points()
        blocked = _env_names(self.env, BLOCK_VARIABLE)
        no_autoload = _env_flag(self.env, NO_AUTOLOAD_VARIABLE)
        explicit = _env_names(self.env, EXPLICIT_PLUGINS_VARIABLE)
        # Built-ins first, so a third-party plugin cannot shadow a built-in name.
        ordered = sorted(entry_points, key=lambda ep: (self._source_of(ep) != "built-in", ep.name))
        for entry_point in ordered:
            self._load_one(entry_point, blocked, no_autoload, explicit)
        for variable, names in ((EXPLICIT_PLUGINS_VARIABLE, explicit), (BLOCK_VARIABLE, blocked)):
            unknown = sorted(names - {r.name.split(" (")[0] for r in self.records.values()})
            if unknown:  # a typo here must not pass unnoticed, but once is enough
                installed = ", ".join(sorted(self.records))
                self._notice(f"{variable} names {', '.join(map(repr, unknown))}, but no installed plugin has "
                             f"that name (installed: {installed})", once=True)
        self._collect_registrations()
        self._warn_summary()
        if strict if strict is not None else _env_flag(self.env, STRICT_VARIABLE):
            self.raise_if_strict(force=True)
        return self

    def problems(self) -> list[PluginRecord]:
        """The records of plugins that failed or had registrations refused."""
        return [r for r in self.records.values() if r.status in (PluginStatus.FAILED, PluginStatus.PARTIAL)]

    def raise_if_strict(self, force: bool = False) -> None:
        """Raise :class:`PluginLoadError` when a plugin has a problem and strict mode is on."""
        problems = self.problems()
        if problems and (force or _env_flag(self.env, STRICT_VARIABLE)):
            details = "; ".join(f"{r.name}: {r.reason}" for r in problems)
            raise PluginLoadError(
                f"{len(problems)} plugin(s) failed to load or were refused in part and {STRICT_VARIABLE}=1: "
                f"{details}; see `drivetrain plugins list`"
            )

    def _warn_summary(self) -> None:
        """One line for every problem together: a broken plugin must not flood every command."""
        problems = self.problems()
        if not problems:
            return
        failed = [r.name for r in problems if r.status is PluginStatus.FAILED]
        partial = [r.name for r in problems if r.status is PluginStatus.PARTIAL]
        parts = []
        if failed:
            parts.append(f"{len(failed)} plugin(s) skipped ({', '.join(failed)})")
        if partial:
            parts.append(f"{len(partial)} with registrations refused ({', '.join(partial)})")
        self._notice(f"{' and '.join(parts)}; `drivetrain plugins list` shows why")

    def _notice(self, message: str, once: bool = False) -> None:
        if _env_flag(self.env, REPORTED_VARIABLE):
            _log_debug("%s", message)
        elif once:
            _warn_once(message)
        else:
            _warn_line(message)

    def _distribution_of(self, entry_point: Any) -> tuple[str | None, str | None]:
        """(name, version) of the distribution that declares ``entry_point``.

        Each answer parses the distribution's metadata, and every built-in plugin shares one
        distribution: asked once per distribution and load.
        """
        dist = getattr(entry_point, "dist", None)
        if dist is None:
            return None, None
        known = self._distributions.get(id(dist))
        if known is None:
            known = self._distributions[id(dist)] = (dist, *distribution_name_and_version(dist))
        return known[1], known[2]

    def _source_of(self, entry_point: Any) -> str:
        dist_name = self._distribution_of(entry_point)[0]
        if (dist_name or "").replace("_", "-").lower() == CORE_DISTRIBUTION:
            return "built-in"
        return "third-party"

    def _load_one(self, entry_point: Any, blocked: set[str], no_autoload: bool, explicit: set[str]) -> None:
        dist_name, dist_version = self._distribution_of(entry_point)
        record = PluginRecord(
            name=entry_point.name,
            distribution=dist_name or "?",
            version=dist_version or "?",
            source=self._source_of(entry_point),
            entry_point=entry_point.value,
            status=PluginStatus.AVAILABLE,
        )
        if record.name in self.records:
            first = self.records[record.name]
            record.name = f"{record.name} ({record.distribution})"
            # Blocking by name would block the first one too, so the fix is never to block.
            owner = "a built-in plugin" if first.source == "built-in" else f"the plugin of {first.distribution}"
            self._fail(
                record,
                f"duplicate plugin name {entry_point.name!r}, already taken by {owner}; this one is refused: "
                f"uninstall {record.distribution} (pip uninstall {record.distribution}) or ask its author "
                "to rename its entry point",
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
        if record.source == "third-party":
            try:
                module = plugin_guard.call(entry_point.load, self.timeout)
            except plugin_guard.PluginCodeFailed as exc:  # anything, KeyboardInterrupt and os._exit included
                self._fail(record, f"import failed: {exc.reason}")
                return
        else:
            try:
                module = entry_point.load()
            except BaseException as exc:  # SystemExit included; a Ctrl-C on the main thread is the user's
                if isinstance(exc, KeyboardInterrupt):
                    raise
                self._fail(record, f"import failed: {type(exc).__name__}: {exc}")
                return
        info = getattr(module, "PLUGIN_INFO", None)
        if not isinstance(info, PluginInfo):
            self._fail(record, "declares no PLUGIN_INFO = drivetrain.plugin_api.PluginInfo(...); add one")
            return
        problem = plugin_info_problem(info)
        if problem:
            self._fail(record, problem)
            return
        record.api_version = info.api_version
        record.description = info.description
        problem = api_version_problem(info.api_version)
        if problem:
            self._fail(record, problem)
            return
        problem, hooks = self._register_checked(module, record.name)
        if problem:
            self._fail(record, problem)
            return
        self.modules[record.name] = module
        self.infos[record.name] = info
        record.hooks = hooks
        for hook_name in sorted(set(record.hooks) & set(hookspecs.DEPRECATED_HOOKS)):
            # still heard (no removal within a major version), but its author should move on
            self._notice(f"plugin {record.name!r} implements {hook_name}, which is deprecated and goes at "
                         f"plugin API 2.0: {hookspecs.DEPRECATED_HOOKS[hook_name]}", once=True)
        missing = missing_requirements(info.requires)
        if missing:
            record.status = PluginStatus.UNAVAILABLE
            record.install = info.how_to_install()
            record.reason = f"needs {', '.join(missing)}: {record.install}"

    def call_plugin_code(self, plugin_name: str, function: Any) -> Any:
        """``function()`` of plugin ``plugin_name`` as discovery calls it: a third-party one
        bounded in time on the worker of :mod:`drivetrain.plugin_guard`, a built-in one here.

        Raises:
            plugin_guard.PluginCodeFailed: it raised, exited or did not answer in time.
        """
        record = self.records.get(plugin_name)
        if record is None or record.source != "built-in":
            return plugin_guard.call(function, self.timeout)
        try:
            return function()
        except Exception as exc:
            raise plugin_guard.PluginCodeFailed(f"{type(exc).__name__}: {exc}", exc) from exc

    def _register_checked(self, module: Any, name: str) -> tuple[str | None, list[str]]:
        """Register a plugin module's hooks: ``(None, the names of its hooks, sorted)``; or
        ``(why they are refused, [])``, having taken back what a failed registration added
        (pluggy adds hooks one by one and stops at a bad one).

        A spec-less caller an unknown hook created stays behind, empty: nothing calls it.
        """
        problem, callers = None, []
        try:
            self.hooks.register(module, name=name)
        except pluggy.PluginValidationError as exc:
            problem = f"bad hook implementation: {exc}"
        except Exception as exc:
            problem = f"cannot register: {type(exc).__name__}: {exc}"
        else:
            callers = self.hooks.get_hookcallers(module) or []
            problem = _unknown_hook(callers)
        if problem is not None:
            if self.hooks.get_plugin(name) is module:
                self.hooks.unregister(name=name)
            return problem, []
        return None, sorted(caller.name for caller in callers)

    def _hook_problem(self, module: Any) -> str | None:
        """Validate a module's hooks on a scratch manager, so the real one never sees a bad one.

        The scratch manager is reused while it stays clean (reading the hook specs is most of
        the cost): a valid module is unregistered from it again, and a failed registration,
        which can leave part of a module behind, throws it away.
        """
        scratch = self._scratch
        if scratch is None:
            scratch = HookRegistry(PROJECT_NAME)
            scratch.add_hookspecs(hookspecs)
        self._scratch = None
        try:
            scratch.register(module)
        except pluggy.PluginValidationError as exc:
            return f"bad hook implementation: {exc}"
        except Exception as exc:
            return f"cannot register: {type(exc).__name__}: {exc}"
        problem = _unknown_hook(scratch.get_hookcallers(module) or ())
        if problem is not None:
            return problem
        scratch.unregister(module)
        self._scratch = scratch
        return None

    def _not_run_hooks(self, role_object: Any) -> str | None:
        """Registration hooks run once on every plugin, never on a role object: refuse them there."""
        for name in dir(role_object):
            if self.hooks.parse_hookimpl_opts(role_object, name) is None:
                continue
            if "run" not in getattr(self.hooks.hook, name).spec.argnames:
                return f"{name!r} is not a run hook; a role object implements run hooks only (keep it in the module)"
        return None

    def _fail(self, record: PluginRecord, reason: str) -> None:
        record.status = PluginStatus.FAILED
        record.reason = reason
        self.records.setdefault(record.name, record)
        _log_debug("drivetrain plugin %r skipped: %s", record.name, reason)

    # ------------------------------------------------------------ registration

    def _collect_registrations(self) -> None:
        """Call every registration hook once, plugin by plugin, keeping who said what.

        Each item is checked on its own (:mod:`drivetrain.registration`): one of the wrong
        type, with junk fields, or claiming a name another plugin registered first is refused
        with the reason, and the plugin keeps the rest. Plugins are asked in load order, so
        built-ins claim their names before any third-party plugin can.
        """
        order = {name: index for index, name in enumerate(self.records)}
        offered: dict[str, int] = {}
        for hook_name in registration.ITEM_TYPE:
            caller = getattr(self.hooks.hook, hook_name, None)
            if caller is None:  # a hook this version of the specs does not declare
                continue
            claimed: dict[str, str] = {}  # identity -> plugin that registered it first
            for impl in sorted(caller.get_hookimpls(), key=lambda i: order[i.plugin_name]):
                record = self.records[impl.plugin_name]
                if record.status is PluginStatus.FAILED:
                    continue
                try:
                    answer = self.call_plugin_code(record.name, impl.function)
                except plugin_guard.PluginCodeFailed as exc:
                    self._unregister_failed(record, f"{hook_name} failed: {exc.reason}")
                    continue
                if not answer:
                    continue
                problem = registration.answer_problem(hook_name, answer)
                if problem:
                    offered[record.name] = offered.get(record.name, 0) + 1
                    self._refuse(record, f"{hook_name} {problem}")
                    continue
                items = list(answer.items() if isinstance(answer, dict) else answer)
                offered[record.name] = offered.get(record.name, 0) + len(items)
                kept = [item for item in items if self._accept(hook_name, record, item, claimed)]
                if not kept:
                    continue
                self._registrations.setdefault(hook_name, {})[record.name] = (
                    dict(kept) if isinstance(answer, dict) else kept
                )
                kind = KIND_OF_HOOK.get(hook_name)
                if kind and kind not in record.kinds:
                    record.kinds.append(kind)
        for plugin_name, reasons in self._refused.items():
            record = self.records[plugin_name]
            text = "refused: " + "; ".join(reasons)
            kept = sum(len(by_plugin.get(plugin_name, ())) for by_plugin in self._registrations.values())
            if record.status is PluginStatus.FAILED:
                continue
            if kept == 0 and offered.get(plugin_name):
                self._unregister_failed(record, f"nothing it registered is valid: {text}")
            elif record.status is PluginStatus.AVAILABLE:
                record.status, record.reason = PluginStatus.PARTIAL, text
            else:
                record.reason = f"{record.reason}; {text}" if record.reason else text

    def _accept(self, hook_name: str, record: PluginRecord, item: Any, claimed: dict[str, str]) -> bool:
        """Whether one registered item is kept; a refused one is recorded with the reason."""
        problem = registration.item_problem(hook_name, item)
        if problem:
            self._refuse(record, problem)
            return False
        taken = [(identity, claimed[identity]) for identity in registration.identities(hook_name, item)
                 if identity in claimed]
        # Built-ins load first and are one distribution: they are never refused for a name,
        # and a fix never suggests blocking one.
        if taken and record.source != "built-in":
            identity, owner = taken[0]
            label = registration.item_label(hook_name, item)
            if self.records[owner].source == "built-in":
                fix = (f"a third-party plugin cannot replace a built-in one; rename it in {record.distribution}, "
                       f"or remove that plugin (pip uninstall {record.distribution})")
            else:
                fix = (f"uninstall one of them (pip uninstall {record.distribution}) or block this one "
                       f"({BLOCK_VARIABLE}={record.name})")
            source = "built-in " if self.records[owner].source == "built-in" else ""
            self._refuse(record, f"{label}: the name {identity!r} is taken by {source}plugin {owner!r}; {fix}")
            return False
        for identity in registration.identities(hook_name, item):
            claimed.setdefault(identity, record.name)
        return True

    def _refuse(self, record: PluginRecord, reason: str) -> None:
        self._refused.setdefault(record.name, []).append(reason)
        _log_debug("drivetrain plugin %r: refused %s", record.name, reason)

    def refused(self, plugin_name: str) -> list[str]:
        """Why each item plugin ``plugin_name`` registered was refused (empty when none was)."""
        return list(self._refused.get(plugin_name, ()))

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

    def resolve_factory(self, plugin_name: str, spec: Any, what: str, attribute: str = "factory") -> Any:
        """Import the object a descriptor's ``factory`` (or other lazy ``attribute``) names, or
        say which plugin to fix.

        ``what`` names the descriptor in the message (``"tracker 'wandb'"``).
        """
        ref = getattr(spec, attribute)
        try:
            return resolve(ref)
        except Exception as exc:
            raise PluginSelectionError(
                f"{what} of plugin {plugin_name!r} ({self._distribution(plugin_name)}) cannot be loaded: {ref!r} "
                f"failed with {type(exc).__name__}: {exc}; {self._fix(plugin_name)}"
            ) from exc

    def construct(self, plugin_name: str, spec: Any, what: str) -> Any:
        """The object a descriptor's ``factory`` builds (a platform, a cluster environment), or
        a :class:`PluginSelectionError` naming the plugin and the fix when building it fails."""
        factory = self.resolve_factory(plugin_name, spec, what)
        try:
            return factory()
        except DrivetrainError:
            raise  # a plugin's own clear message (which library to install)
        except Exception as exc:
            raise PluginSelectionError(
                f"{what} of plugin {plugin_name!r} ({self._distribution(plugin_name)}) cannot start: "
                f"{type(exc).__name__}: {exc}; {self._fix(plugin_name)}"
            ) from exc

    def warn(self, message: str) -> None:
        """A :class:`PluginWarning` line about a plugin (at debug level in launched children,
        whose launcher already said it)."""
        self._notice(message)

    def _distribution(self, plugin_name: str) -> str:
        record = self.records.get(plugin_name)
        return record.distribution if record else "?"

    def _fix(self, plugin_name: str) -> str:
        """How to repair a plugin whose lazy parts fail: install what it needs, or reinstall it."""
        record = self.records.get(plugin_name)
        info = self.infos.get(plugin_name)
        distribution = self._distribution(plugin_name)
        if info is not None and (info.requires or info.install_hint):
            return info.how_to_install()
        if record is not None and record.source == "built-in":
            return "reinstall drivetrain (pip install --force-reinstall drivetrain)"
        return (f"reinstall or upgrade {distribution} (pip install -U {distribution}), or block the plugin "
                f"with {BLOCK_VARIABLE}={plugin_name}")

    def record_of(self, pluggy_name: str) -> PluginRecord | None:
        """The record of a module's or a role object's pluggy name (``"plugin[role name]"``)."""
        return self.records.get(pluggy_name) or self.records.get(pluggy_name.split("[", 1)[0])

    def hook_failure(self, hook_name: str, impls: Iterable[Any], exc: BaseException) -> PluginHookError | None:
        """The error to raise instead of ``exc``, which a call of hook ``hook_name`` raised:
        one naming the third-party plugin whose implementation (one of ``impls``) raised it.

        ``None`` (raise ``exc`` unchanged) when it is a drivetrain error raised on purpose,
        when a built-in plugin raised it, or when no implementation's frame is in its
        traceback (the core's own code failed).
        """
        if isinstance(exc, DrivetrainError) or not isinstance(exc, Exception):
            return None  # the common case: no traceback walk
        by_code = {}
        for impl in impls:
            function = getattr(impl.function, "__func__", impl.function)
            for layer in (function, inspect.unwrap(function)):
                code = getattr(layer, "__code__", None)
                if code is not None:
                    by_code.setdefault(code, impl)
        traceback = exc.__traceback__
        while traceback is not None:  # outermost first: the implementation pluggy called
            impl = by_code.get(traceback.tb_frame.f_code)
            if impl is not None:
                break
            traceback = traceback.tb_next
        else:
            return None
        return self.fault(impl.plugin_name, hook_name, exc)

    def fault(self, plugin_name: str, where: str, exc: BaseException) -> PluginHookError | None:
        """The error naming third-party plugin ``plugin_name`` (or a role object's pluggy name)
        as the cause of ``exc``, raised in ``where`` (a hook, ``"launcher 'x' applies()"``);
        ``None`` for a drivetrain error raised on purpose or a built-in plugin's exception."""
        record = self.record_of(plugin_name)
        if record is None or record.source == "built-in" or isinstance(exc, DrivetrainError):
            return None
        if not isinstance(exc, Exception):
            return None
        return PluginHookError(
            f"plugin {record.name!r} ({record.distribution} {record.version}) failed in {where}: "
            f"{type(exc).__name__}: {exc}; this is a fault of the plugin, not of your script: upgrade it "
            f"(pip install -U {record.distribution}), report it to its author, or block it with "
            f"{BLOCK_VARIABLE}={record.name}"
        )

    def role_class(self, plugin_name: str, spec: Any, role: str, base: type) -> type | None:
        """The class ``spec.hooks`` names for the run's ``role`` (``"strategy"``, ``"precision"``),
        checked to be a subclass of ``base``; ``None`` when the descriptor names none."""
        if getattr(spec, "hooks", None) is None:
            return None
        what = f"the {role} class of {self._role_label(role, spec)}"
        target = self.resolve_factory(plugin_name, spec, what, attribute="hooks")
        if not (isinstance(target, type) and issubclass(target, base)):
            raise PluginSelectionError(
                f"{what} of plugin {plugin_name!r} ({self._distribution(plugin_name)}) is {target!r}, not a subclass "
                f"of drivetrain.plugin_api.{base.__name__} (API 2.0); {self._fix(plugin_name)}")
        return target

    def register_role_object(self, plugin_name: str, spec: Any, role: str, role_object: Any, owner: str) -> str | None:
        """Register the run hooks of a run's role object with pluggy, as ``"<plugin>[<role> <name>]<owner>"``;
        ``None`` (nothing registered) when it implements none. The run that owns the object
        unregisters it (:meth:`unregister_role_object`) when it ends.
        """
        if not any(self.hooks.parse_hookimpl_opts(role_object, n) for n in dir(role_object)):
            return None
        problem = self._hook_problem(role_object) or self._not_run_hooks(role_object)
        if problem:
            raise PluginSelectionError(f"the {role} class of {self._role_label(role, spec)} of plugin {plugin_name!r} "
                                       f"({self._distribution(plugin_name)}): {problem}; {self._fix(plugin_name)}")
        key = f"{plugin_name}[{self._role_label(role, spec)}]{owner}"
        self.hooks.register(role_object, name=key)
        record = self.records.get(plugin_name)
        if record is not None:
            names = (n for n in dir(role_object) if self.hooks.parse_hookimpl_opts(role_object, n))
            record.hooks = sorted({*record.hooks, *names})
        return key

    def unregister_role_object(self, key: str) -> None:
        """Take a role object's hooks back (its run has ended)."""
        if self.hooks.get_plugin(key) is not None:
            self.hooks.unregister(name=key)

    @staticmethod
    def _role_label(role: str, spec: Any) -> str:
        return " ".join(dict.fromkeys(filter(None, (role, spec.name, getattr(spec, "backend", None)))))

    def mark_active(self, names: Iterable[str]) -> None:
        for name in names:
            record = self.records.get(name)
            if record is not None and record.status is PluginStatus.AVAILABLE:
                record.status = PluginStatus.ACTIVE

    def subset_caller(self, hook_name: str, active: Iterable[str]) -> pluggy.HookCaller:
        """A caller of ``hook_name`` that reaches only the plugins named in ``active``."""
        keep = set(active)
        others = [plugin for name, plugin in self.hooks.list_name_plugin() if plugin is not None and name not in keep]
        return self.hooks.subset_hook_caller(hook_name, others)


_default_manager: PluginManager | None = None
_warned: set[str] = set()


def _warn_line(message: str) -> None:
    """A :class:`PluginWarning` printed as one line (no source line under it)."""
    warnings.warn_explicit(message, PluginWarning, filename="drivetrain", lineno=0, module="drivetrain")


def _warn_once(message: str) -> None:
    """Warn about a setting once per process, however many managers load."""
    if message not in _warned:
        _warned.add(message)
        _warn_line(message)


def get_plugin_manager(check_strict: bool = True) -> PluginManager:
    """The process-wide plugin manager, loaded on first use.

    With ``DRIVETRAIN_STRICT_PLUGINS=1`` and a broken plugin, every call raises
    :class:`PluginLoadError`, unless ``check_strict`` is false (``drivetrain plugins list``
    shows everything first, then fails).
    """
    global _default_manager
    if _default_manager is None:
        _default_manager = PluginManager().load(strict=False)
    if check_strict:
        _default_manager.raise_if_strict()
    return _default_manager


def reset_plugin_manager(manager: PluginManager | None = None) -> None:
    """Replace the process-wide manager (tests, or after installing a plugin at run time)."""
    global _default_manager
    _default_manager = manager
    forget_versions()  # what was installed since is seen by the next manager


def _unknown_hook(callers: Any) -> str | None:
    """Why a plugin whose hooks landed in ``callers`` is refused: one of them has no spec."""
    for caller in callers:
        if not caller.has_spec():
            return f"implements unknown hook {caller.name!r} (misspelt, or needs a newer drivetrain)"
    return None
