"""``DRIVETRAIN_USE_<NAME>=true`` (Accelerate's ``ACCELERATE_USE_<NAME>``): a backend chosen by a variable.

``NAME`` is matched, case-blind, to an installed strategy, then to an installed platform
(``USE_<PLATFORM>_DEVICE`` too), then to a feature a plugin declares (``USE_IPEX``), which
the run activates (``USE_CPU`` is read by the selection itself). A variable set to true that nothing installed
answers is an error, never ignored: a script that asks for a backend must not train without
it. The error says what would make it work, from what is known here without naming any
backend in the core:

1. a plugin of that name is installed but cannot be used: its own reason and install command;
2. the installed drivetrain distribution declares an extra of that name (or of the name's
   first word: ``MEGATRON_LM`` -> ``megatron``): ``pip install 'drivetrain[<extra>]'``, read
   from the distribution's metadata (its ``Provides-Extra`` lines);
3. otherwise: no installed plugin provides it, and ``drivetrain plugins list`` shows what is.

An extra that exists does not promise a plugin: the message says "may provide", because an
extra only installs a library and the plugin that uses it may not be written yet.
"""

from __future__ import annotations

import os
from typing import Mapping

from ..kernel import environment
from ..kernel.errors import PluginSelectionError
from ..kernel.plugin_manager import PluginManager

#: Extras of the distribution that install tooling, not a backend.
_NOT_BACKENDS = frozenset({"all", "test", "tests", "docs", "dev"})
#: Handled by the selection itself (``cpu=True``), not a strategy or platform request.
_SELECTION_OWN = frozenset({"cpu"})


def _requested(env: Mapping[str, str]) -> list[str]:
    """Lower-case names of the ``*_USE_<NAME>`` variables set to true, in a stable order."""
    names: list[str] = []
    for key in sorted(env):
        for prefix in (environment.PREFIX, environment.ALIAS_PREFIX):
            if key.startswith(prefix + "USE_"):
                name = key[len(prefix) + 4:].lower()
                if name and name not in _SELECTION_OWN and name not in names \
                        and environment.read_bool("USE_" + name.upper(), env=env):
                    names.append(name)
    return names


def _same(name: str, candidate: str) -> bool:
    return candidate.lower().replace("-", "_") == name


def _extras() -> list[str]:
    from importlib import metadata

    try:
        declared = metadata.metadata("drivetrain").get_all("Provides-Extra") or []
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return []
    return [extra for extra in declared if extra.lower() not in _NOT_BACKENDS]


def _missing(manager: PluginManager, name: str, variable: str) -> PluginSelectionError:
    record = next((r for r in manager.records.values() if _same(name, r.name)), None)
    if record is not None and not record.usable:
        return PluginSelectionError(f"{variable}=true selects {name!r}, but plugin {record.name!r} cannot be used: "
                                    f"{record.reason}")
    words = [name, name.split("_")[0]]
    extra = next((e for word in words for e in _extras() if _same(word, e)), None)
    if extra is not None:
        return PluginSelectionError(
            f"{variable}=true selects {name!r}, but no installed plugin provides it; the extra that may provide "
            f"it: pip install 'drivetrain[{extra}]' (then see `drivetrain plugins list`), or unset {variable}")
    return PluginSelectionError(
        f"{variable}=true selects {name!r}, but no installed plugin provides a strategy or platform of that name; "
        f"install a plugin that does (`drivetrain plugins list` shows what is installed), or unset {variable}")


def _features(manager: PluginManager) -> dict[str, str]:
    """Each optional feature a loaded plugin declares (``PluginInfo.features``), lower case,
    and the first plugin declaring it."""
    found: dict[str, str] = {}
    for plugin, info in manager.infos.items():
        for feature in info.features:
            found.setdefault(feature.lower(), plugin)
    return found


def requested_features(manager: PluginManager, env: Mapping[str, str] | None = None) -> list[str]:
    """The features the ``*_USE_<NAME>`` variables ask for (``DRIVETRAIN_USE_<FEATURE>=1``).

    A feature is named like the plugins that provide it declare it, so a plugin that is no
    role of the run (an optimising library) is switched on by a variable, a launch option
    that sets it, or a config key whose ``ConfigField.env`` names it.
    """
    env = os.environ if env is None else env
    features = _features(manager)
    return [name for name in _requested(env) if name in features]


def use_requests(manager: PluginManager, env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """The ``(strategy, platform)`` the ``*_USE_<NAME>`` variables select (``None`` when none does).

    Raises:
        PluginSelectionError: a variable set to true names nothing installed and usable here.
    """
    env = os.environ if env is None else env
    strategies = [spec.name for _p, spec in manager.registrations("drivetrain_register_strategies")]
    platforms = [spec.name for _p, spec in manager.registrations("drivetrain_register_platforms")]
    features = _features(manager)
    strategy = platform = None
    for name in _requested(env):
        found_strategy = next((s for s in strategies if _same(name, s)), None)
        # Accelerate's USE_MPS_DEVICE spells a platform with a suffix
        found_platform = next((p for p in platforms if _same(name, p) or _same(name, p + "_device")), None)
        if found_strategy is not None:
            strategy = strategy or found_strategy
        elif found_platform is not None:
            platform = platform or found_platform
        elif name in features and manager.records[features[name]].usable:
            continue  # a feature, activated on the run (requested_features)
        else:
            own, alias = environment.names_of("USE_" + name.upper())
            raise _missing(manager, name, own if own in env else alias)
    return strategy, platform
