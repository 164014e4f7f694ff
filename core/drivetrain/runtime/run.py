"""The run of this process: the chosen plugins and the hooks that reach only them.

A :class:`Run` is created once per process by :class:`drivetrain.state.PartialState`. The
``run`` argument of every run hook is this object. Hook callers are built once per set of
active plugins and cached, so calling a hook in a training step costs one pluggy call.
"""

from __future__ import annotations

import itertools
import weakref
from typing import TYPE_CHECKING, Any, Callable

import pluggy

from ..kernel.plugin_manager import BLOCK_VARIABLE, PluginManager, call_chain

_BLOCK_HINT = f"that {BLOCK_VARIABLE} does not block the platform's communication plugin"

#: Numbers runs of this process, so each run's role objects have their own pluggy names.
_RUN_NUMBERS = itertools.count(1)

if TYPE_CHECKING:  # pragma: no cover
    from .collectives import Collectives
    from .device_platform import Platform
    from ..selection.choice import Selection


class Run:
    """The chosen plugins of this process and what they were configured with.

    Attributes:
        manager: the plugin manager.
        selection: the choice of platform, cluster environment, strategy and precision.
        platform: the platform object built by the chosen platform's factory.
        handler_kwargs: the user's kwargs handlers by class name
            (``{"DistributedDataParallelKwargs": {...}}``), filled by the ``Accelerator``.
        options: values a plugin needs from the facade (``{"fsdp_plugin": ...}``); a plugin
            reads its own keys only.
        state: the :class:`~drivetrain.state.PartialState` (and, once built, the
            ``AcceleratorState`` in ``accelerator_state``).
        extensions: objects returned by ``drivetrain_configure_run`` whose public
            attributes ``AcceleratorState`` and the ``Accelerator`` expose (Accelerate's
            backend-specific attributes such as ``state.deepspeed_plugin``).
        data_parallel: ``(rank, size)`` of this process among the groups of processes that
            read different batches, set by a strategy whose other processes share a batch
            (tensor- or context-parallel peers); ``None``: every process reads its own.
    """

    def __init__(self, manager: PluginManager, selection: Selection, platform: Platform) -> None:
        self.manager = manager
        self.selection = selection
        self.platform = platform
        self.handler_kwargs: dict[str, dict[str, Any]] = {}
        self.options: dict[str, Any] = {}
        self.state: Any = None
        self.accelerator_state: Any = None
        self.extensions: list[Any] = []
        self.data_parallel: tuple[int, int] | None = None
        self._extra: list[str] = []
        self._owner = f"#{next(_RUN_NUMBERS)}"
        # Every role object built for this run, dropped from the manager with the run.
        self._owned: set[str] = set()
        weakref.finalize(self, _forget_role_objects, manager, self._owned)
        self._roles: dict[str, str] = {}
        self._roles = self._role_objects()
        self._callers: dict[str, pluggy.HookCaller] = {}
        self._collectives: Collectives | None = None
        # ---- services' view of the newest Accelerator (issue 43, services) --------------------
        # Its Session (runtime/session.py), held weakly: the run outlives the Accelerators sharing it.
        self._session: Callable[[], Any] = _no_session
        # ---- end of the services' block ---------------------------------------------------------

    @property
    def session(self) -> Any:
        """The newest ``Accelerator``'s :class:`~drivetrain.runtime.session.Session` on this run
        (what it prepared, its project configuration, counters), or ``None``: services and
        Accelerate's module functions read it, never the ``Accelerator``."""
        return self._session()

    @session.setter
    def session(self, session: Any) -> None:
        self._session = weakref.ref(session) if session is not None else _no_session

    @property
    def data_parallel_rank(self) -> int:
        """Which share of the data this process reads (its process index unless a strategy says)."""
        return self.data_parallel[0] if self.data_parallel is not None else self.state.process_index

    @property
    def data_parallel_size(self) -> int:
        """How many shares the data is split into (the process count unless a strategy says)."""
        return self.data_parallel[1] if self.data_parallel is not None else self.state.num_processes

    @property
    def active_plugins(self) -> list[str]:
        """Plugin names whose run hooks are called, in role order."""
        return list(dict.fromkeys([*self.selection.plugin_names(), *self._extra]))

    def activate(self, *plugin_names: str) -> None:
        """Make more plugins active (a tracker, a compiler); invalidates the cached callers."""
        for name in plugin_names:
            self.manager.require(name)
            if name not in self._extra:
                self._extra.append(name)
        self._refresh()

    def activate_feature(self, feature: str) -> None:
        """Activate every usable plugin that declares ``feature`` in ``PluginInfo.features``."""
        from ..kernel.errors import PluginSelectionError

        providers = [name for name, info in self.manager.infos.items()
                     if feature in info.features and self.manager.records[name].usable]
        if not providers:
            raise PluginSelectionError(f"no installed plugin provides {feature!r}; see `drivetrain plugins list`")
        self.activate(*providers)

    def extension_attribute(self, name: str) -> Any:
        """The attribute ``name`` of the first extension that has it; ``AttributeError`` otherwise.

        An extension that declares ``exposes`` (a tuple of names) answers those names only,
        so a role object can be its own extension without offering its state and hooks.
        """
        if not name.startswith("_"):
            for extension in self.extensions:
                exposed = getattr(extension, "exposes", None)
                if exposed is not None and name not in exposed:
                    continue
                try:
                    return getattr(extension, name)
                except AttributeError:
                    continue
        raise AttributeError(name)

    def role(self, role: str) -> Any:
        """The role object of the run's chosen ``role`` (``"strategy"``, ``"precision"``), or
        ``None`` when the chosen item has none (or nothing is chosen).

        Built for this run, it keeps the run's state of that strategy or precision; plugin code
        outside a hook (a helper the user calls) reaches the strategy through it.
        """
        key = self._roles.get(role)
        return self.manager.role_objects.get(key) if key is not None else None

    def reselect(self, selection: Selection) -> None:
        """Replace the strategy and precision choice (the ``Accelerator``'s arguments win)."""
        self.selection = selection
        self._refresh()

    def _role_objects(self) -> dict[str, str]:
        """Pluggy names of the chosen strategy's and precision's role objects (``hooks=``), by role."""
        chosen = (("strategy", self.selection.strategy_plugin, self.selection.strategy),
                  ("precision", self.selection.precision_plugin, self.selection.precision))
        keys = {role: self.manager.role_hooks(plugin, spec, role, owner=self._owner)
                for role, plugin, spec in chosen if spec is not None}
        roles = {role: key for role, key in keys.items() if key}
        self._owned.update(key for key in roles.values() if key.endswith(self._owner))
        return roles

    def _refresh(self) -> None:
        self._roles = self._role_objects()
        self._callers.clear()
        self.manager.mark_active(self.active_plugins)

    def hook(self, name: str) -> pluggy.HookCaller:
        """The caller of run hook ``name`` restricted to the active plugins."""
        caller = self._callers.get(name)
        if caller is None:
            caller = self._callers[name] = self.manager.subset_caller(name, [*self.active_plugins, *self._roles.values()])
        return caller

    def call(self, name: str, **kwargs: Any) -> Any:
        """Call run hook ``name`` on the active plugins (``run`` is passed for you).

        An exception a third-party implementation raises becomes a
        :class:`~drivetrain.errors.PluginHookError` naming the plugin, chained to it.
        """
        caller = self.hook(name)
        if not caller.get_hookimpls():
            # No active plugin answers: skip pluggy's call machinery, which the step path
            # (backward, clip, autocast) would otherwise pay on every step for nothing.
            return None if caller.spec is not None and caller.spec.opts.get("firstresult") else []
        try:
            return caller(run=self, **kwargs)
        except Exception as exc:
            # pluggy raises the implementation's own exception: say whose it is.
            failure = self.manager.hook_failure(name, caller.get_hookimpls(), exc)
            if failure is None:
                raise
            raise failure from exc

    def chain(self, name: str, value_name: str, value: Any, **kwargs: Any) -> Any:
        """Call a *chained* run hook: each active implementation transforms ``value``."""
        return call_chain(self.hook(name), value_name, value, self.manager, run=self, **kwargs)

    @property
    def collectives(self) -> Collectives:
        if self._collectives is None:
            from .collectives import SingleProcessCollectives

            world_size = self.selection.cluster.world_size
            provided = self.call("drivetrain_collectives") if world_size > 1 else None
            if provided is None and world_size > 1:
                from ..kernel.errors import DistributedError

                # Falling back to one process here would make every gather and reduce
                # silently local: wrong results instead of an error.
                raise DistributedError(
                    f"{world_size} processes but no active plugin provides collectives (active: "
                    f"{', '.join(self.active_plugins)}); check `drivetrain plugins list` and {_BLOCK_HINT}"
                )
            self._collectives = provided or SingleProcessCollectives()
        return self._collectives

    def forget_collectives(self) -> None:
        self._collectives = None

    def wrap_collectives(self, wrap: Callable[[Collectives], Collectives]) -> None:
        """Put ``wrap(collectives)`` in place of the run's collectives (a layer that watches every
        call, such as the step monitor's timer; ``wrap`` may also take such a layer off again)."""
        self._collectives = wrap(self.collectives)


def _no_session() -> None:
    return None


def _forget_role_objects(manager: PluginManager, keys: set[str]) -> None:
    for key in keys:
        manager.forget_role_object(key)
