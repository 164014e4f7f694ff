"""Experiment tracking: the base class trackers subclass, and the set of trackers a run logs to.

Tracker plugins register :class:`~drivetrain.plugin_api.TrackerSpec` descriptors; the
:class:`Trackers` facade turns the user's ``log_with`` into tracker objects through those
registrations only, so the core never names a tracker library.
"""

from __future__ import annotations

import inspect
import logging
import os
import warnings
from collections.abc import MutableMapping
from typing import Any, Iterator

from ..kernel.contributed import surface_getattr
from ..kernel.errors import ConfigError, DrivetrainError, TrackerError
from .tracker_inputs import check_init_kwargs, check_logging_dir, check_project_name

logger = logging.getLogger("drivetrain.tracking")  # its name before the layers, kept for log filters

#: The ``log_with`` value that selects every tracker whose plugin is usable here.
ALL_TRACKERS = "all"


class GeneralTracker:
    """A connection to one experiment tracker, with Accelerate's contract.

    A subclass sets three class attributes and implements the methods its backend supports:

    Attributes:
        name: the name users pass to ``log_with``.
        requires_logging_directory: the constructor takes ``logging_dir``.
        main_process_only: log from the main process only (the default). Set it to
            ``False`` for trackers that collect from every process themselves.

    The constructor takes ``run_name`` (the project name given to ``init_trackers``), then
    ``logging_dir`` when required (or when the run has one and the constructor accepts a
    ``logging_dir`` keyword), then the user's ``init_kwargs`` for this tracker. It must not
    contact the backend: :meth:`start` does, on the processes that log.

    ``GeneralTracker(_blank=True)`` is a stand-in whose methods do nothing: what
    ``get_tracker`` returns on a process that does not log.
    """

    name: str = ""
    requires_logging_directory: bool = False
    main_process_only: bool = True

    def __init__(self, _blank: bool = False) -> None:
        self._blank = _blank
        if _blank:
            return
        missing = [attr for attr in ("name", "requires_logging_directory") if not hasattr(type(self), attr)]
        if missing or not type(self).name:
            raise NotImplementedError(
                f"{type(self).__name__} must define the class attributes 'name' and "
                "'requires_logging_directory'"
            )

    @property
    def is_blank(self) -> bool:
        """``True`` for the do-nothing stand-in of a process that does not log."""
        return getattr(self, "_blank", False)

    @property
    def tracker(self) -> Any:
        """The backend's own run object (a run, a writer, an experiment ...)."""
        return None

    def start(self) -> None:
        """Open the run on the backend. Called once, on each process that logs."""

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Record the run's hyper-parameters."""

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record scalar (and other) values at ``step``."""

    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record images, where the backend supports them."""
        if not self.is_blank:
            raise NotImplementedError(f"the {self.name} tracker cannot log images")

    def log_table(self, table_name: str, columns: list[str] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None, **kwargs: Any) -> None:
        """Record a table, where the backend supports them."""
        if not self.is_blank:
            raise NotImplementedError(f"the {self.name} tracker cannot log tables")

    def on_checkpoint(self, event: str, directory: str) -> None:
        """Be told that a checkpoint was saved or loaded (``event`` is ``"save"``/``"load"``)."""

    def finish(self) -> None:
        """Flush and close the run."""

    def __repr__(self) -> str:
        if self.is_blank:
            return "GeneralTracker(_blank=True)"
        return f"<{type(self).__name__} {self.name!r}>"


class LibraryRunTracker(GeneralTracker):
    """Base of trackers that open one run object of their library in :meth:`start`.

    Keeps the constructor's arguments (``run_name``, ``logging_dir``, the user's init kwargs)
    and exposes the library's run as ``tracker``; subclasses set ``self.run`` in ``start``.
    """

    def __init__(self, run_name: str, logging_dir: str | os.PathLike | None = None, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir = os.fspath(logging_dir) if logging_dir is not None else None
        self.init_kwargs = kwargs
        self.run: Any = None

    @property
    def tracker(self) -> Any:
        return self.run


def images_by_key(values: dict[str, Any], make: Any) -> dict[str, Any]:
    """``{key: make(image)}``, or a list of them where a value is a list of images."""
    return {key: [make(v) for v in value] if isinstance(value, (list, tuple)) else make(value)
            for key, value in values.items()}


def plain_value(value: Any) -> Any:
    """A one-element tensor or array (or a numpy scalar) as a Python number; anything else as is.

    Tracker plugins call it on logged values so users may log ``loss`` without ``.item()``.
    """
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, (str, bytes)):
        size = getattr(value, "numel", None)
        count = size() if callable(size) else getattr(value, "size", 1)
        if count == 1:
            try:
                return item()
            except (TypeError, ValueError, RuntimeError):
                return value
    return value


def is_number(value: Any) -> bool:
    """Whether ``value`` (after :func:`plain_value`) is a real number a tracker can plot."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def flatten_config(values: dict[str, Any], separator: str = "/", prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 0.1}}`` as ``{"optim/lr": 0.1}``, for backends with flat parameters."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{separator}{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            flat.update(flatten_config(value, separator, name))
        else:
            flat[name] = plain_value(value)
    return flat


def _choice_name(item: Any) -> str:
    """The lower-case name of a ``log_with`` entry given as a string or a string enum member."""
    value = getattr(item, "value", item)
    text = str.__str__(value) if isinstance(value, str) else str(value)
    return text.strip().lower()


def _needs_directory(name: str) -> str:
    # Accelerate's wording: scripts and log filters match "Logging with `<name>` requires a `logging_dir`"
    return (f"Logging with `{name}` requires a `logging_dir`: pass Accelerator(project_dir=...) or "
            "ProjectConfiguration(logging_dir=...)")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or "(no message)"


def _tracker_failure(name: str, what: str, exc: BaseException,
                     init_kwargs: dict[str, dict[str, Any]]) -> TrackerError:
    """Our one-line error for a tracker that failed, naming it and the init_kwargs it was given."""
    given = init_kwargs.get(name)
    hint = f" (check init_kwargs[{name!r}]: {', '.join(sorted(given))})" if given else ""
    return TrackerError(f"the {name!r} tracker {what}: {type(exc).__name__}: {_one_line(exc)}{hint}")


def _accepts_keyword(factory: Any, keyword: str) -> bool:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == keyword and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in parameters)


class _Choice:
    """One registered tracker the user selected: its spec, its plugin, how it was chosen."""

    def __init__(self, plugin: str, spec: Any, explicit: bool) -> None:
        self.plugin = plugin
        self.spec = spec
        self.explicit = explicit

    @property
    def name(self) -> str:
        return self.spec.name


class Trackers:
    """The experiment trackers of one run; what ``Accelerator(log_with=...)`` holds.

    Args:
        log_with: ``None``, a tracker name, ``"all"``, a ``LoggerType`` member, a
            :class:`GeneralTracker` instance, or a list mixing these. Names are matched,
            case-insensitively, against the trackers that plugins register
            (``drivetrain_register_trackers``); ``"all"`` means every tracker of a usable
            plugin (those needing a logging directory are left out, with a warning, when the
            run has none).
        logging_dir: where trackers that write files put them (``project_dir`` or
            ``ProjectConfiguration(logging_dir=...)``).
        is_main_process: whether this process is the main one. Trackers whose class says
            ``main_process_only`` are created, started and logged to on the main process
            only; elsewhere :meth:`get_tracker` returns ``GeneralTracker(_blank=True)``.
        run: the :class:`drivetrain.run.Run` of this process, if any: the plugins of the
            chosen trackers are made active in it.
        manager: the plugin manager to resolve names with (default: the run's, or the
            process-wide one).

    Choices are checked here, when the ``Accelerator`` is built, so that a typo or a missing
    library fails before training starts. Nothing of a tracker library is imported until
    :meth:`init_trackers`.

    Iterating yields the tracker objects that log on this process (after
    ``init_trackers``); the object is true when anything was selected.
    """

    def __init__(self, log_with: Any, logging_dir: str | os.PathLike | None = None, is_main_process: bool = True,
                 run: Any = None, manager: Any = None) -> None:
        self.logging_dir = os.fspath(logging_dir) if logging_dir is not None else None
        self.is_main_process = is_main_process
        self.run = run
        if manager is None and run is not None:
            manager = run.manager
        if manager is None:
            from ..kernel.plugin_manager import get_plugin_manager

            manager = get_plugin_manager()
        self.manager = manager
        self._choices: list[_Choice | GeneralTracker] = self._select(log_with)
        self._trackers: list[GeneralTracker] = []
        self._finished = False
        self._log_failures: dict[str, int] = {}  # tracker name -> log() calls that raised
        if run is not None:
            plugins = [c.plugin for c in self._choices if isinstance(c, _Choice) and c.plugin is not None]
            if plugins:
                run.activate(*dict.fromkeys(plugins))

    # ------------------------------------------------------------- selection

    def _registered(self) -> dict[str, tuple[str, Any]]:
        """Tracker name -> (plugin name, spec); the first registration of a name wins."""
        found: dict[str, tuple[str, Any]] = {}
        for plugin, spec in self.manager.registrations("drivetrain_register_trackers"):
            if spec.name.lower() not in _REMOVED_PLUGIN_TRACKERS:
                found.setdefault(spec.name.lower(), (plugin, spec))
        return found

    def _select(self, log_with: Any) -> list[_Choice | GeneralTracker]:
        if log_with is None:
            return []
        items = list(log_with) if isinstance(log_with, (list, tuple, set)) else [log_with]
        registered = self._registered()
        chosen: list[_Choice | GeneralTracker] = []
        want_all = False
        for item in items:
            if isinstance(item, GeneralTracker):
                chosen.append(item)
            elif isinstance(item, str):
                name = _choice_name(item)
                if name == ALL_TRACKERS:
                    want_all = True
                elif name not in [c.name.lower() for c in chosen]:
                    chosen.append(self._explicit_choice(name, registered))
            elif item is not None:
                raise ConfigError(
                    f"log_with accepts tracker names, '{ALL_TRACKERS}' and GeneralTracker instances, not "
                    f"{type(item).__name__} ({item!r})"
                )
        if want_all:
            for name, (plugin, spec) in registered.items():
                if name in [c.name.lower() for c in chosen] or not self.manager.records[plugin].usable:
                    continue
                if spec.requires_logging_directory and self.logging_dir is None:
                    logger.warning("log_with='all' leaves out the %r tracker: it needs project_dir or "
                                   "ProjectConfiguration(logging_dir=...)", spec.name)
                    continue
                chosen.append(_Choice(plugin, spec, explicit=False))
        return chosen

    def _explicit_choice(self, name: str, registered: dict[str, tuple[str, Any]]) -> _Choice:
        user_class = _USER_TRACKERS.get(name)
        if user_class is not None:  # a class given to register_tracker_class: no plugin behind it
            if user_class.requires_logging_directory and self.logging_dir is None:
                raise ConfigError(_needs_directory(name))
            return _Choice(None, _UserTrackerSpec(user_class), explicit=True)
        if name not in registered:
            record = self.manager.records.get(name)
            if record is not None and not record.usable and record.reason:
                raise ConfigError(f"tracker {name!r} cannot be used: plugin {name!r} is {record.status}: "
                                  f"{record.reason}")
            known = ", ".join(sorted(registered)) or "none"
            raise ConfigError(f"unknown tracker {name!r} in log_with; installed trackers: {known} "
                              f"(or '{ALL_TRACKERS}'); see `drivetrain plugins list`")
        plugin, spec = registered[name]
        record = self.manager.records[plugin]
        if not record.usable:
            fix = f" ({record.install})" if record.install and record.install not in record.reason else ""
            raise ConfigError(f"tracker {name!r} cannot be used: plugin {plugin!r} is {record.status}: "
                              f"{record.reason}{fix}")
        if spec.requires_logging_directory and self.logging_dir is None:
            raise ConfigError(_needs_directory(name))
        return _Choice(plugin, spec, explicit=True)

    @property
    def names(self) -> list[str]:
        """The names of the selected trackers, in order."""
        return [c.name for c in self._choices]

    # ------------------------------------------------------------- the run

    def init_trackers(self, project_name: str, config: dict[str, Any] | None = None,
                      init_kwargs: dict[str, dict[str, Any]] | None = None) -> None:
        """Create and start every tracker that logs on this process, then store ``config``.

        ``init_kwargs`` maps a tracker name to the keyword arguments of its constructor
        (``{"<name>": {"tags": [...]}}``). Calling it again finishes the previous trackers.
        """
        # every input is checked before any tracker writes anything
        if self._choices:
            project_name = check_project_name(project_name)
            check_logging_dir(self.logging_dir)
        init_kwargs = check_init_kwargs(init_kwargs, self.names, warn=self.is_main_process)
        if self._trackers and not self._finished:
            self.end_training()
        self._trackers, self._finished = [], False
        try:
            created = [(choice, self._create(choice, project_name, init_kwargs)) for choice in self._choices]
            for choice, tracker in created:
                if tracker is None:
                    continue
                try:
                    tracker.start()
                except Exception as exc:
                    if isinstance(exc, DrivetrainError) and (not isinstance(choice, _Choice) or choice.explicit):
                        raise
                    if not isinstance(choice, _Choice) or choice.explicit:
                        raise _tracker_failure(choice.name, "did not start", exc, init_kwargs) from exc
                    logger.warning("log_with='all' leaves out the %r tracker: it failed to start: %s: %s",
                                   choice.name, type(exc).__name__, exc)
                    continue
                self._trackers.append(tracker)
        except BaseException:
            self._finish_quietly()  # the trackers already started are not left open
            raise
        if config is not None:
            for tracker in self._trackers:
                tracker.store_init_configuration(config)

    def _logs_here(self, tracker_class: Any) -> bool:
        return self.is_main_process or not getattr(tracker_class, "main_process_only", True)

    def _create(self, choice: _Choice | GeneralTracker, project_name: str,
                init_kwargs: dict[str, dict[str, Any]]) -> GeneralTracker | None:
        if isinstance(choice, GeneralTracker):
            return choice if self._logs_here(choice) else None
        try:
            factory = choice.spec.factory if choice.plugin is None else \
                self.manager.resolve_factory(choice.plugin, choice.spec, f"tracker {choice.name!r}")
        except Exception as exc:
            if choice.explicit:
                raise
            logger.warning("log_with='all' leaves out the %r tracker: %s", choice.name, exc)
            return None
        if not self._logs_here(factory):
            return None
        kwargs = dict(init_kwargs.get(choice.name, {}))
        try:
            if choice.spec.requires_logging_directory or getattr(factory, "requires_logging_directory", False):
                return factory(project_name, self.logging_dir, **kwargs)
            wants_dir = "logging_dir" not in kwargs and _accepts_keyword(factory, "logging_dir")
            if self.logging_dir is not None and wants_dir:
                kwargs["logging_dir"] = self.logging_dir
            return factory(project_name, **kwargs)
        except Exception as exc:
            if choice.explicit and isinstance(exc, DrivetrainError):
                raise
            if choice.explicit:
                raise _tracker_failure(choice.name, "could not be created", exc, init_kwargs) from exc
            logger.warning("log_with='all' leaves out the %r tracker: %s: %s", choice.name, type(exc).__name__, exc)
            return None

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The tracker called ``name`` (its backend object with ``unwrap=True``).

        On a process where that tracker does not log, a ``GeneralTracker(_blank=True)``
        whose methods do nothing.
        """
        wanted = _choice_name(name)
        for tracker in self._trackers:
            if tracker.name.lower() == wanted:
                return tracker.tracker if unwrap else tracker
        if wanted in [n.lower() for n in self.names]:
            return GeneralTracker(_blank=True)
        raise ConfigError(f"{name!r} is not one of this run's trackers: {', '.join(self.names) or 'none'}")

    def log(self, values: dict[str, Any], step: int | None = None,
            log_kwargs: dict[str, dict[str, Any]] | None = None) -> None:
        """Log ``values`` at ``step`` to every tracker of this process.

        ``log_kwargs`` maps a tracker name to extra keyword arguments of its ``log``. A tracker
        whose ``log`` raises (its server unreachable, a value it refuses) does not end the run:
        the others still log the values, the first failure of each tracker is one warning
        naming it, and ``end_training`` says how many calls each failing tracker lost.
        """
        log_kwargs = log_kwargs or {}
        for tracker in self._trackers:
            try:
                tracker.log(values, step=step, **log_kwargs.get(tracker.name, {}))
            except DrivetrainError:
                raise  # the values or keywords given are wrong: the caller's to fix
            except Exception as exc:
                self._log_failed(tracker.name, step, exc)

    def _log_failed(self, name: str, step: int | None, exc: Exception) -> None:
        count = self._log_failures.get(name, 0) + 1
        self._log_failures[name] = count
        if count == 1:
            logger.warning("the %r tracker failed to log step %s (%s: %s); the run goes on and the other trackers "
                           "logged it; this tracker's later failures are counted and reported at end_training",
                           name, step, type(exc).__name__, _one_line(exc))

    def log_failures(self) -> dict[str, int]:
        """How many ``log`` calls each tracker that failed has lost in this run."""
        return dict(self._log_failures)

    def on_checkpoint(self, event: str, directory: str | os.PathLike) -> None:
        """Tell every tracker that a checkpoint was saved (``"save"``) or loaded (``"load"``).

        A tracker that fails is logged, not raised: a checkpoint is never lost to a tracker.
        """
        for tracker in self._trackers:
            try:
                tracker.on_checkpoint(event, os.fspath(directory))
            except Exception as exc:
                logger.warning("the %r tracker could not record checkpoint %s of %s: %s: %s",
                               tracker.name, event, os.fspath(directory), type(exc).__name__, exc)

    def _finish_quietly(self) -> None:
        for tracker in reversed(self._trackers):
            try:
                tracker.finish()
            except Exception as exc:
                logger.warning("the %r tracker did not finish cleanly: %s: %s", tracker.name, type(exc).__name__, exc)
        self._trackers, self._finished = [], True

    def end_training(self) -> None:
        """Finish every tracker (once; later calls do nothing), the last started first.

        Several tracker libraries wrap ``sys.stdout`` or hooks while their run is open;
        closing them in the reverse order of opening unwinds those wrappers cleanly.
        """
        if self._finished:
            return
        self._finished = True
        for name, count in self._log_failures.items():
            logger.warning("the %r tracker failed to log %d time(s) in this run: its record of the run is "
                           "incomplete (the other trackers have it whole)", name, count)
        errors = []
        for tracker in reversed(self._trackers):
            try:
                tracker.finish()
            except Exception as exc:  # finish the others first, then report
                errors.append(exc)
        if errors:
            raise errors[0]

    # ------------------------------------------------------------- container manners

    def __iter__(self) -> Iterator[GeneralTracker]:
        return iter(self._trackers)

    def __len__(self) -> int:
        return len(self._trackers)

    def __bool__(self) -> bool:
        return bool(self._choices)

    def __repr__(self) -> str:
        return f"Trackers({self.names!r}, started={[t.name for t in self._trackers]!r})"


# ------------------------------------------------------------ Accelerate's module functions


#: Tracker classes registered in this process with :func:`register_tracker_class`, by name.
_USER_TRACKERS: dict[str, type] = {}

#: Names of plugin trackers deleted from ``LOGGER_TYPE_TO_CLASS``: ``log_with`` no longer finds them.
_REMOVED_PLUGIN_TRACKERS: set[str] = set()


class _UserTrackerSpec:
    """What a registered tracker class stands for, in the shape of a ``TrackerSpec``."""

    def __init__(self, tracker_class: type) -> None:
        self.name = tracker_class.name
        self.factory = tracker_class
        self.requires_logging_directory = tracker_class.requires_logging_directory


class TrackerClasses(MutableMapping):
    """Accelerate's ``LOGGER_TYPE_TO_CLASS``: tracker name -> ``GeneralTracker`` subclass.

    The names are those the tracker plugins register and those given to
    :func:`register_tracker_class`. The plugins are asked on first use, not when this module
    is imported, and a plugin's class is imported only when it is looked up, so reading the
    names imports no tracker library. Writing to the mapping is what registering does: a
    class set under a name is what ``log_with="<name>"`` then selects, and a deleted name is
    no longer selectable.
    """

    def _plugin_specs(self) -> dict[str, tuple[str, Any]]:
        from ..kernel.plugin_manager import get_plugin_manager

        found: dict[str, tuple[str, Any]] = {}
        for plugin, spec in get_plugin_manager().registrations("drivetrain_register_trackers"):
            found.setdefault(spec.name.lower(), (plugin, spec))
        return found

    def _plugin_class(self, name: str) -> type | None:
        entry = self._plugin_specs().get(name)
        if entry is None:
            return None
        from ..kernel.plugin_manager import get_plugin_manager

        return get_plugin_manager().resolve_factory(entry[0], entry[1], f"tracker {name!r}")

    def __getitem__(self, name: str) -> type:
        key = _choice_name(name)
        if key in _USER_TRACKERS:
            return _USER_TRACKERS[key]
        if key in _REMOVED_PLUGIN_TRACKERS or key not in self._plugin_specs():
            raise KeyError(name)
        return self._plugin_class(key)

    def __setitem__(self, name: str, tracker_class: type) -> None:
        key = _choice_name(name)
        _REMOVED_PLUGIN_TRACKERS.discard(key)
        # putting a plugin's own class back (a saved copy restored) leaves the name to its plugin
        if key in self._plugin_specs() and tracker_class is self._plugin_class(key):
            _USER_TRACKERS.pop(key, None)
        else:
            _USER_TRACKERS[key] = tracker_class

    def __delitem__(self, name: str) -> None:
        key = _choice_name(name)
        if key not in self:
            raise KeyError(name)
        _USER_TRACKERS.pop(key, None)
        if key in self._plugin_specs():
            _REMOVED_PLUGIN_TRACKERS.add(key)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        key = _choice_name(name)
        return key in _USER_TRACKERS or (key not in _REMOVED_PLUGIN_TRACKERS and key in self._plugin_specs())

    def __iter__(self) -> Iterator[str]:
        names = [name for name in self._plugin_specs() if name not in _REMOVED_PLUGIN_TRACKERS]
        return iter(names + [name for name in _USER_TRACKERS if name not in names])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"LOGGER_TYPE_TO_CLASS({list(self)!r})"


LOGGER_TYPE_TO_CLASS = TrackerClasses()


def _defines(tracker_class: type, attribute: str) -> bool:
    """Whether a subclass of ``GeneralTracker`` sets ``attribute`` itself (the base's default does not count)."""
    return any(attribute in vars(klass) for klass in tracker_class.__mro__
               if klass is not GeneralTracker and issubclass(klass, GeneralTracker))


def register_tracker_class(tracker_class: type) -> type:
    """Make ``log_with="<tracker_class.name>"`` select a ``GeneralTracker`` subclass in this
    process, without writing a plugin; returns the class, so it works as a decorator.

    The class must set ``name`` and ``requires_logging_directory``; registering over a name
    that is already taken (a plugin's tracker included) warns and replaces it. A plugin
    (``drivetrain_register_trackers``) is the way to offer a tracker to every script; this is
    for one script's own tracker.
    """
    if not (isinstance(tracker_class, type) and issubclass(tracker_class, GeneralTracker)):
        raise ConfigError(f"register_tracker_class takes a GeneralTracker subclass, not {tracker_class!r}")
    name = _choice_name(getattr(tracker_class, "name", ""))
    if not name or not _defines(tracker_class, "name"):
        raise ConfigError(f"{tracker_class.__name__} needs a class attribute 'name' to be registered")
    if not _defines(tracker_class, "requires_logging_directory"):
        raise ConfigError(f"{tracker_class.__name__} needs a class attribute 'requires_logging_directory' "
                          "(True when its constructor takes logging_dir) to be registered")
    if name in LOGGER_TYPE_TO_CLASS and LOGGER_TYPE_TO_CLASS[name] is not tracker_class:
        warnings.warn(f"register_tracker_class replaces the tracker registered as {name!r} "
                      f"({LOGGER_TYPE_TO_CLASS[name].__name__}) with {tracker_class.__name__}", UserWarning,
                      stacklevel=2)
    _USER_TRACKERS[name] = tracker_class
    _REMOVED_PLUGIN_TRACKERS.discard(name)
    return tracker_class


def get_available_trackers() -> list[str]:
    """The names of the trackers usable here: those whose plugin is usable (its library
    installed), and those registered with :func:`register_tracker_class`."""
    from ..kernel.plugin_manager import get_plugin_manager

    names = [spec.name for _plugin, spec in
             get_plugin_manager().registrations("drivetrain_register_trackers", usable_only=True)]
    return names + [name for name in _USER_TRACKERS if name not in names]


def filter_trackers(log_with: Any, logging_dir: str | os.PathLike | None = None) -> list[Any]:
    """What ``log_with`` selects here: tracker names (and the ``GeneralTracker`` objects given).

    ``"all"`` keeps the usable trackers (those needing a directory only with ``logging_dir``);
    an unknown or unusable name fails with the reason, as ``Accelerator(log_with=...)`` does.
    """
    selected = Trackers(log_with, logging_dir=logging_dir)
    return [choice if isinstance(choice, GeneralTracker) else choice.name for choice in selected._choices]


def on_main_process(function: Any) -> Any:
    """Decorator for tracker methods: run only on the main process when the tracker's
    ``main_process_only`` says so (elsewhere the call does nothing)."""
    import functools

    @functools.wraps(function)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "main_process_only", False):
            from ..runtime.state import PartialState

            if not PartialState().is_main_process:
                return None
        return function(self, *args, **kwargs)

    return wrapper


# tracker classes (``WandBTracker``) come from the plugins that own them
__getattr__ = surface_getattr("drivetrain.tracking")
