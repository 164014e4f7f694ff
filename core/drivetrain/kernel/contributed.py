"""Names users import from drivetrain's modules that a plugin contributes (``DeepSpeedPlugin``).

Plugins answer ``drivetrain_public_names`` (and, ranked below it, ``drivetrain_fallback_names``)
with ``{key: "module:attribute"}``. A plain key is a name of ``drivetrain`` itself; a dotted
key (``"tracking.WandBTracker"``) names the module it belongs to, relative to ``drivetrain``.

:func:`surface_getattr` is the one module ``__getattr__`` of drivetrain: Accelerate's import
paths serve these names (and their own lazy re-exports) through it, and so does the plugin API.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, Callable, Mapping, Sequence

TOP_LEVEL = ""


def _split(key: str) -> tuple[str, str]:
    module, _, name = key.rpartition(".")
    return module, name


# hook name -> (the manager it was built from, its table): built once per loaded manager
_tables: dict[str, tuple[Any, dict[str, dict[str, str]]]] = {}


def _collect(hook_name: str) -> dict[str, dict[str, str]]:
    # imported here so that a light module (``utils.environment``) can install
    # :func:`surface_getattr` without loading the plugin manager until a name is asked for
    from .plugin_manager import get_plugin_manager

    manager = get_plugin_manager()
    cached = _tables.get(hook_name)
    if cached is not None and cached[0] is manager:
        return cached[1]
    by_module: dict[str, dict[str, str]] = {}
    for _plugin, (key, ref) in manager.registrations(hook_name):
        module, name = _split(key)
        by_module.setdefault(module, {}).setdefault(name, ref)  # the first plugin loaded wins
    _tables[hook_name] = (manager, by_module)
    return by_module


def module_public_names(module: str = TOP_LEVEL, *, fallbacks: bool = True) -> dict[str, str]:
    """Every name contributed to ``drivetrain.<module>`` and its lazy reference.

    A plugin's own names rank above every fallback, so a backend's real probe replaces the
    stand-in that answers ``False`` when the backend is absent.
    """
    names = dict(_collect("drivetrain_public_names").get(module, {}))
    if fallbacks:
        for name, ref in _collect("drivetrain_fallback_names").get(module, {}).items():
            names.setdefault(name, ref)
    return names


def all_plugin_public_names() -> dict[str, str]:
    """Every name contributed to ``drivetrain`` itself; the first plugin loaded wins a clash."""
    return module_public_names(TOP_LEVEL)


def plugin_public_name(name: str, module: str = TOP_LEVEL) -> str | None:
    ref = _collect("drivetrain_public_names").get(module, {}).get(name)
    return ref if ref is not None else _collect("drivetrain_fallback_names").get(module, {}).get(name)


def resolve_module_name(module: str, name: str, *, also_top_level: bool = False) -> object:
    """The value of a contributed ``drivetrain.<module>.<name>``; ``AttributeError`` when none.

    ``also_top_level`` lets a module offer the names contributed to ``drivetrain`` as well
    (``drivetrain.utils`` offers ``DeepSpeedPlugin`` as Accelerate's ``accelerate.utils`` does).
    """
    from .descriptors import resolve

    ref = plugin_public_name(name, module)
    if ref is None and also_top_level:
        ref = plugin_public_name(name)
    if ref is None:
        raise AttributeError(f"module 'drivetrain{'.' + module if module else ''}' has no attribute {name!r}")
    return resolve(ref)


#: Every module whose ``__getattr__`` is :func:`surface_getattr`'s, by name: the one place a
#: module of drivetrain answers names it does not define (a test checks no other does).
SURFACE_MODULES: dict[str, "SurfaceNames"] = {}


class SurfaceNames:
    """What a module of drivetrain's surface answers beyond what it defines, in this order:

    1. ``computed``: names whose value is built when asked (``TORCH_DISTRIBUTED_OPERATION_TYPES``
       lists the installed multi-process types), ``{name: function of no argument}``;
    2. ``lazy``: re-exports imported on first use, ``{name: "module:attribute"}``, so
       importing the module stays cheap (no torch);
    3. ``submodules``: ``drivetrain.utils.rich`` as an attribute of ``drivetrain.utils``;
    4. ``on_request``: a function building a family of names (``require_<what>``), raising
       ``AttributeError`` for any other;
    5. the names plugins contribute under ``contributed_as`` (``"utils.environment"``), then
       under each key of ``also`` (``""``: the names of ``drivetrain`` itself).

    ``cache`` keeps a resolved value in the module's namespace (later reads skip this).
    """

    def __init__(self, module_name: str, *, contributed_as: str | None = None,
                 computed: Mapping[str, Callable[[], Any]] | None = None, lazy: Mapping[str, str] | None = None,
                 submodules: bool = False, on_request: Callable[[str], Any] | None = None,
                 also: Sequence[str] = (), missing_hint: str = "", cache: bool = False) -> None:
        self.module_name = module_name
        self.contributed_as = module_name.partition(".")[2] if contributed_as is None else contributed_as
        self.computed = dict(computed or {})
        self.lazy = dict(lazy or {})
        self.submodules = submodules
        self.on_request = on_request
        self.also = tuple(also)
        self.missing_hint = missing_hint
        self.cache = cache

    def names(self) -> set[str]:
        """What ``dir()`` adds: the computed, lazy and contributed names."""
        found = {*self.computed, *self.lazy, *module_public_names(self.contributed_as)}
        for key in self.also:
            found.update(module_public_names(key))
        return found

    def __call__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = self._find(name)
        if self.cache:
            sys.modules[self.module_name].__dict__[name] = value
        return value

    def _find(self, name: str) -> Any:
        if name in self.computed:
            return self.computed[name]()
        if name in self.lazy:
            from .descriptors import resolve

            return resolve(self.lazy[name])
        if self.submodules and importlib.util.find_spec(f"{self.module_name}.{name}") is not None:
            return importlib.import_module(f"{self.module_name}.{name}")
        if self.on_request is not None:
            try:
                return self.on_request(name)
            except AttributeError:
                pass
        for key in (self.contributed_as, *self.also):
            try:
                return resolve_module_name(key, name)
            except AttributeError:
                pass
        raise AttributeError(f"module {self.module_name!r} has no attribute {name!r}{self.missing_hint}")


def surface_getattr(module_name: str, **answers: Any) -> SurfaceNames:
    """The module ``__getattr__`` of ``module_name`` (``__getattr__ = surface_getattr(__name__, ...)``):
    the one mechanism by which a module of drivetrain answers names it does not define (the
    keywords are :class:`SurfaceNames`'s). Used by Accelerate's import paths, which serve what
    plugins contribute, and by the plugin API for its names whose modules import torch."""
    answer = SurfaceNames(module_name, **answers)
    SURFACE_MODULES[module_name] = answer
    return answer
