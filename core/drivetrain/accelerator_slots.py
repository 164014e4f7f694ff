"""Accelerate's backend arguments of ``Accelerator(...)`` given by position.

Accelerate's constructor has backend arguments among the general ones: four after
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

#: How many positions of ``Accelerator.__init__`` are reserved for backend arguments.
SLOT_COUNT = 6


def slot_names(module: str = "accelerator", name: str = "STRATEGY_SLOTS",
               count: int = SLOT_COUNT) -> tuple[str, ...] | None:
    """The argument names of the reserved positions, in order, or ``None`` when no plugin names them."""
    from .kernel.contributed import resolve_module_name

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
