"""Names users import from drivetrain's modules that a plugin contributes (``DeepSpeedPlugin``).

Plugins answer ``drivetrain_public_names`` (and, ranked below it, ``drivetrain_fallback_names``)
with ``{key: "module:attribute"}``. A plain key is a name of ``drivetrain`` itself; a dotted
key (``"tracking.WandBTracker"``) names the module it belongs to, relative to ``drivetrain``.
"""

from __future__ import annotations

from typing import Any, Callable

TOP_LEVEL = ""


def _split(key: str) -> tuple[str, str]:
    module, _, name = key.rpartition(".")
    return module, name


# hook name -> (the manager it was built from, its table): built once per loaded manager
_tables: dict[str, tuple[Any, dict[str, dict[str, str]]]] = {}


def _collect(hook_name: str) -> dict[str, dict[str, str]]:
    # imported here so that a light module (``utils.environment``) can install
    # :func:`contributed_getattr` without loading the plugin manager until a name is asked for
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



def contributed_getattr(module_name: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module_name`` (``"drivetrain.utils.environment"``) that serves
    what plugins contribute under its dotted key (``"utils.environment.override_numa_affinity"``).

    Lets a submodule offer a backend's function at the path Accelerate documents without the
    core naming the backend; the look-up runs only for names the module does not define.
    """
    module = module_name.partition(".")[2]

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return resolve_module_name(module, name)

    return __getattr__
