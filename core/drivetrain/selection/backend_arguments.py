"""Accelerate's backend arguments of ``Accelerator(...)`` and ``AcceleratorState(...)``.

The core names no backend, so it learns these arguments from the installed strategies: each
``StrategySpec.accelerator_arguments`` declares the keywords it takes (``fsdp_plugin``).
This module answers the three questions the constructors and the attribute look-up ask:

- which name a reserved position carries (``positional_options``, ``slot_names``);
- which strategy the given keywords select (``strategy_for_options``);
- which ``<backend>_plugin`` names are attributes that read ``None`` while their strategy is
  unused (``strategy_option_attributes``).

Positions: Accelerate's constructor has backend arguments among the general ones: four after
``dataloader_config`` and two at the end. The core keeps their positions, so a positional
call written for Accelerate lands every other argument right, but does not name them: which
name each reserved position carries is the public name ``accelerator.STRATEGY_SLOTS`` that a
plugin contributes (the accelerate_compat plugin lists Accelerate's order). A value given
by position is then handled exactly like the same value given by keyword: the strategy whose
``StrategySpec.accelerator_arguments`` declares the name receives it. ``AcceleratorState``
reserves Accelerate's five backend positions the same way (``state.ACCELERATOR_STATE_SLOTS``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..kernel.errors import ConfigError
from ..kernel.plugin_manager import get_plugin_manager
from ..kernel.contributed import resolve_module_name
from .choice import requests_from_env

#: How many positions of ``Accelerator.__init__`` are reserved for backend arguments.
SLOT_COUNT = 6


def slot_names(module: str = "accelerator", name: str = "STRATEGY_SLOTS",
               count: int = SLOT_COUNT) -> tuple[str, ...] | None:
    """The argument names of the reserved positions, in order, or ``None`` when no plugin names them."""
    try:
        names = resolve_module_name(module, name)
    except AttributeError:
        return None
    names = tuple(names)
    if len(names) != count or not all(isinstance(n, str) and n.isidentifier() for n in names):
        return None
    return names


def positional_options(values: Sequence[Any], by_keyword: Mapping[str, Any], owner: str = "Accelerator()",
                       names_at: tuple[str, str] = ("accelerator", "STRATEGY_SLOTS")) -> dict[str, Any]:
    """The keyword form of the values given in the reserved positions (``None`` is not given).

    ``names_at`` is the public name (module, name) that lists the positions' argument names.
    Raises ``TypeError`` (Python's error for a bad call) when a position is used that no
    plugin names, or when the same argument also came by keyword.
    """
    given = [(index, value) for index, value in enumerate(values) if value is not None]
    if not given:
        return {}
    names = slot_names(*names_at, count=len(values))
    if names is None:
        raise TypeError(f"{owner} got a backend argument by position, and no installed plugin says which "
                        "(the accelerate_compat plugin does); pass it by keyword, under Accelerate's name for it")
    options: dict[str, Any] = {}
    for index, value in given:
        name = names[index]
        if by_keyword.get(name) is not None:
            raise TypeError(f"{owner} got multiple values for argument {name!r}")
        options[name] = value
    return options


def _strategy_specs() -> list[Any]:
    return [spec for _plugin, spec in get_plugin_manager().registrations("drivetrain_register_strategies")]


def strategy_option_attributes() -> set[str]:
    """Accelerate's ``<backend>_plugin`` attributes: the ``accelerator_arguments`` installed
    strategies declare (read as ``None`` while that strategy is unused). Any other name is a typo."""
    return {argument for spec in _strategy_specs() for argument in spec.accelerator_arguments
            if argument.endswith("_plugin")}


def strategy_for_options(options: dict[str, Any]) -> str | None:
    """The strategy whose ``accelerator_arguments`` the given keywords are.

    A keyword no installed strategy declares is accepted when its value is ``None`` (a
    script written for Accelerate passing ``..._plugin=None``) and refused otherwise.
    """
    given = {arg: value for arg, value in options.items() if value is not None}
    if not given:
        return None
    specs = _strategy_specs()
    owners = {arg: spec.name for spec in specs for arg in spec.accelerator_arguments}
    unknown = sorted(set(given) - set(owners))
    if unknown:
        raise TypeError(f"Accelerator() got unexpected keyword argument(s) {unknown}: no installed strategy "
                        f"accepts them (strategies accept: {sorted(owners) or 'none'}); install the plugin "
                        "that provides it, see `drivetrain plugins list`")
    chosen = {owners[arg] for arg in given}
    requested = requests_from_env(get_plugin_manager()).strategy
    if requested and requested not in chosen and any(
            spec.name == requested and set(given) <= set(spec.composes_arguments) for spec in specs):
        # the launcher's strategy composes these options (a layout Accelerate's guide passes in
        # code while the config file names the strategy): it stays the run's
        return requested
    if len(chosen) > 1:
        # one strategy may compose with another's options (a mesh that shards with FSDP)
        composing = [spec.name for spec in specs
                     if spec.name in chosen and set(given) <= {*spec.accelerator_arguments, *spec.composes_arguments}]
        if len(composing) != 1:
            raise ConfigError(f"options for several strategies were given ({sorted(chosen)}); choose one")
        return composing[0]
    return chosen.pop()
