"""pluggy's plugin manager with quicker look-ups of a module plugin's hooks.

Every process builds one and registers every plugin module in it at start-up; pluggy's own
look-ups, made for any kind of plugin object, were a third of that.
"""

from __future__ import annotations

import inspect
from types import FunctionType, MethodType, ModuleType
from typing import Any

import pluggy

from .descriptors import PROJECT_NAME

__all__ = ["HookRegistry"]

_IMPL_MARKER = f"{PROJECT_NAME}_impl"
_SPEC_MARKER = f"{PROJECT_NAME}_spec"


class HookRegistry(pluggy.PluginManager):
    """pluggy's manager, with a quicker look at the attributes of a module plugin.

    Registering a module makes pluggy look up every name of ``dir(module)`` through
    ``inspect.getattr_static`` (so that no descriptor runs), and a plugin module holds mostly
    imports and helpers: at every start, for every plugin, that was a third of registering.
    A module's attributes are its ``__dict__``, where no descriptor runs anyway, so anything
    there that cannot carry the marker is skipped at once, a plain function's marker is read
    directly, and what else can carry one is left to pluggy.

    pluggy before 1.7 reads an object plugin's attributes with ``getattr``, which runs its
    properties: a role object's property that needs its run (and raises until then) made it
    fail to register. Such attributes are skipped here, whatever pluggy's version.
    """

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        known, options = _module_marker(plugin, name, _IMPL_MARKER)
        if known:
            return options
        if not isinstance(plugin, (ModuleType, type)) and not _can_be_a_hook(plugin, name):
            return None
        return super().parse_hookimpl_opts(plugin, name)

    def parse_hookspec_opts(self, module_or_class: Any, name: str) -> Any:
        # the same quick look for the hook specification modules, read by every manager made
        known, options = _module_marker(module_or_class, name, _SPEC_MARKER)
        return options if known else super().parse_hookspec_opts(module_or_class, name)

    def get_hookcallers(self, plugin: Any) -> Any:
        """pluggy's answer, found from a module's own hook functions instead of a search of
        every hook's implementations (asked for every plugin at every start)."""
        if type(plugin) is not ModuleType or self.get_name(plugin) is None:
            return super().get_hookcallers(plugin)
        callers = []
        for name in list(plugin.__dict__):
            options = self.parse_hookimpl_opts(plugin, name)
            if options is not None:
                caller = getattr(self.hook, options.get("specname") or name, None)
                # a registration refused part-way added only the hooks before the bad one
                if caller is not None and caller not in callers and _holds(caller, plugin):
                    callers.append(caller)
        return callers


def _holds(caller: Any, plugin: Any) -> bool:
    return any(impl.plugin is plugin for impl in caller.get_hookimpls())


def _can_be_a_hook(plugin: Any, name: str) -> bool:
    """Whether attribute ``name`` of an object plugin is a function or method, found without
    running a descriptor (a property's value is never a hook)."""
    value = inspect.getattr_static(plugin, name, None)
    return isinstance(value, (FunctionType, MethodType, staticmethod, classmethod))


def _module_marker(namespace: Any, name: str, marker: str) -> tuple[bool, Any]:
    """``(True, options or None)`` when ``name`` of a module is answered here: a plain
    function (its marker's options, read as pluggy reads them) or anything that cannot carry
    a marker (``None``); ``(False, None)`` leaves the look-up to pluggy."""
    if type(namespace) is not ModuleType:
        return False, None
    value = namespace.__dict__.get(name)
    if type(value) is FunctionType:
        options = value.__dict__.get(marker)
        return True, options if isinstance(options, dict) else None
    if isinstance(value, (MethodType, staticmethod, classmethod)):
        return False, None
    return True, None
