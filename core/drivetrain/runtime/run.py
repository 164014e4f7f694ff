"""The run of one ``AcceleratorState``: the chosen plugins, its role objects, and the hooks
that reach only them.

The process's first :class:`Run` is created by :class:`drivetrain.state.PartialState`; every
``AcceleratorState`` then creates its own (:meth:`Run.successor`), which replaces it as the
process's run. A run holds its platform, strategy and precision as typed attributes
(``run.platform``, ``run.strategy``, ``run.precision``: :mod:`drivetrain.kernel.roles`), built
when it is; the core calls those objects directly on the per-step path. The ``run`` argument of
every run hook is this object. Hook callers are built once per set of active plugins and
cached, so calling a hook costs one pluggy call.
"""

from __future__ import annotations

import itertools
import weakref
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pluggy

from ..kernel.plugin_manager import BLOCK_VARIABLE, PluginManager
from ..kernel.roles import Precision, Strategy

_BLOCK_HINT = f"that {BLOCK_VARIABLE} does not block the platform's communication plugin"

#: Numbers runs of this process, so each run's role objects have their own pluggy names.
_RUN_NUMBERS = itertools.count(1)

if TYPE_CHECKING:  # pragma: no cover
    from .collectives import Collectives
    from .device_platform import Platform
    from ..selection.choice import Selection


class Run:
    """The chosen plugins of one ``AcceleratorState`` (or of the process, before one) and its
    role objects. Plugins read it through :class:`drivetrain.plugin_api.Run`.

    Attributes:
        manager: the plugin manager.
        selection: the choice of platform, cluster environment, strategy and precision.
        platform: the platform object built by the chosen platform's factory.
        strategy: the chosen strategy's object (``StrategySpec.hooks``), or a plain
            :class:`~drivetrain.kernel.roles.Strategy` when none is chosen or it names none.
        precision: the precision object the strategy owns (``Strategy.own_precision`` of the
            chosen ``PrecisionSpec.hooks`` object, or of a plain ``Precision``).
        handler_kwargs: the user's kwargs handlers by class name
            (``{"DistributedDataParallelKwargs": {...}}``), filled by the ``Accelerator``.
        grad_scaler: the gradient scaler the ``Accelerator`` made (``None``: no loss scaling).
        compile_options: the ``TorchDynamoPlugin`` the ``Accelerator`` compiles with, or ``None``.
        state: the :class:`~drivetrain.state.PartialState` (and, once built, the
            ``AcceleratorState`` in ``accelerator_state``).
        extensions: objects returned by ``drivetrain_configure_run`` whose public
            attributes ``AcceleratorState`` and the ``Accelerator`` expose (Accelerate's
            backend-specific attributes such as ``state.deepspeed_plugin``).
        data_parallel: ``(rank, size)`` of this process among the groups of processes that
            read different batches, set by a strategy whose other processes share a batch
            (tensor- or context-parallel peers); ``None``: every process reads its own.
    """

    def __init__(self, manager: PluginManager, selection: Selection, platform: Platform,
                 strategy_arguments: Mapping[str, Any] | None = None, *, previous: Run | None = None,
                 accelerator_state: Any = None) -> None:
        self.manager = manager
        self.selection = selection
        self.platform = platform
        self.handler_kwargs: dict[str, Any] = {}
        self.grad_scaler: Any = None
        self.compile_options: Any = None
        self.state: Any = previous.state if previous is not None else None
        self.accelerator_state: Any = accelerator_state
        self.extensions: list[Any] = []
        self.data_parallel: tuple[int, int] | None = None
        # the process's parts a new AcceleratorState's run keeps: activated features, the process group
        self._extra: list[str] = list(previous._extra) if previous is not None else []
        self._collectives: Collectives | None = previous._collectives if previous is not None else None
        self._owner = f"#{next(_RUN_NUMBERS)}"
        self._callers: dict[str, pluggy.HookCaller] = {}
        # The pluggy names of this run's role objects that implement run hooks; taken back
        # from the manager when the run ends (close(), or when it is collected).
        self._registered: list[str] = []
        weakref.finalize(self, _unregister, manager, self._registered)
        # The newest Accelerator's Session (runtime/session.py), which services read; held
        # weakly: the run outlives the Accelerators sharing it.
        self._session: Callable[[], Any] = _no_session
        self.strategy, self.precision = self._build_roles(strategy_arguments or {})

    @property
    def session(self) -> Any:
        """The newest ``Accelerator``'s :class:`~drivetrain.runtime.session.Session` on this run
        (what it prepared, its project configuration, counters), or ``None``: services and
        Accelerate's module functions read it, never the ``Accelerator``."""
        return self._session()

    @session.setter
    def session(self, session: Any) -> None:
        self._session = weakref.ref(session) if session is not None else _no_session

    def successor(self, selection: Selection, strategy_arguments: Mapping[str, Any] | None,
                  accelerator_state: Any) -> Run:
        """The run of a new ``AcceleratorState``: the same process (platform, collectives,
        activated features), the state's own strategy and precision choice and role objects.
        This run ends: its role objects' hooks answer no more."""
        run = Run(self.manager, selection, self.platform, strategy_arguments, previous=self,
                  accelerator_state=accelerator_state)
        self.close()
        run.manager.mark_active(run.active_plugins)
        return run

    def close(self) -> None:
        """End this run: its role objects' hooks answer no more."""
        _unregister(self.manager, self._registered)
        self._callers.clear()

    def _build_roles(self, arguments: Mapping[str, Any]) -> tuple[Strategy, Precision]:
        """The chosen strategy's and precision's objects; the strategy owns the precision."""
        selection = self.selection
        strategy_spec, precision_spec = selection.strategy, selection.precision
        strategy_class = (self.manager.role_class(selection.strategy_plugin, strategy_spec, "strategy", Strategy)
                          if strategy_spec is not None else None) or Strategy
        precision_class = (self.manager.role_class(selection.precision_plugin, precision_spec, "precision", Precision)
                           if precision_spec is not None else None) or Precision
        strategy = strategy_class(self, self._strategy_arguments(arguments))
        precision = precision_class(self, precision_spec)
        for plugin, spec, role, role_object in ((selection.strategy_plugin, strategy_spec, "strategy", strategy),
                                                (selection.precision_plugin, precision_spec, "precision", precision)):
            if spec is not None and type(role_object) not in (Strategy, Precision):
                key = self.manager.register_role_object(plugin, spec, role, role_object, self._owner)
                if key is not None:
                    self._registered.append(key)
        return strategy, strategy.own_precision(precision)

    def add_strategy_arguments(self, arguments: Mapping[str, Any]) -> None:
        """Give the strategy the arguments of a further ``Accelerator`` built on this run's state."""
        self.strategy.add_arguments(self._strategy_arguments(arguments))

    def _strategy_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Those of ``arguments`` the chosen strategy declares as its own or composes."""
        spec = self.selection.strategy
        own = (*spec.accelerator_arguments, *spec.composes_arguments) if spec is not None else ()
        return {name: value for name, value in arguments.items() if name in own}

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

    def _refresh(self) -> None:
        self._callers.clear()
        self.manager.mark_active(self.active_plugins)

    def hook(self, name: str) -> pluggy.HookCaller:
        """The caller of run hook ``name`` restricted to the active plugins."""
        caller = self._callers.get(name)
        if caller is None:
            caller = self._callers[name] = self.manager.subset_caller(name, [*self.active_plugins, *self._registered])
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


def _unregister(manager: PluginManager, keys: list[str]) -> None:
    while keys:
        manager.unregister_role_object(keys.pop())


def _no_session() -> None:
    return None
