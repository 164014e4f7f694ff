"""Loaders built on torchdata's ``StatefulDataLoader`` (``use_stateful_dataloader=True``).

A loader class of this package that mixes in :class:`StatefulVariants` is built, when asked
with ``use_stateful_dataloader=True``, as a subclass of itself and of ``StatefulDataLoader``:
the instance *is* a ``StatefulDataLoader`` (``isinstance`` holds, its iterator is torchdata's,
and ``state_dict()`` is torchdata's state, which libraries save and compare), and it still
is the loader class that was asked for.
"""

from __future__ import annotations

import sys
from typing import Any

from ...kernel.errors import ConfigError

_VARIANTS: dict[type, type] = {}


def stateful_dataloader_class() -> type:
    """torchdata's ``StatefulDataLoader``, or a one-line error naming the install."""
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:
        raise ConfigError("use_stateful_dataloader=True needs torchdata 0.8 or newer: "
                          "pip install 'torchdata>=0.8'") from None
    return StatefulDataLoader


def _variant(cls: type) -> type:
    """``cls`` combined with ``StatefulDataLoader`` (one class per ``cls``), named in ``cls``'s
    module so that its instances pickle."""
    if cls not in _VARIANTS:
        base = stateful_dataloader_class()
        variant = type(cls.__name__, (cls, base), {"_stateful_variant": True, "__module__": cls.__module__})
        variant.__qualname__ = f"_Stateful{cls.__qualname__}"
        setattr(sys.modules[cls.__module__], variant.__qualname__, variant)
        _VARIANTS[cls] = variant
    return _VARIANTS[cls]


class _Itself:
    """``loader.base_dataloader``: the loader that does the reading, the instance itself (a
    reference to itself would keep it alive in a cycle). An instance's attribute, as in
    Accelerate: the class has none."""

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            raise AttributeError(f"type object {owner.__name__!r} has no attribute 'base_dataloader'")
        return instance


class StatefulVariants:
    """Picks the ``StatefulDataLoader`` variant of the class at construction; gives
    ``base_dataloader``, the loader that does the reading (the instance itself)."""

    _stateful_variant = False

    def __new__(cls, *args: Any, use_stateful_dataloader: bool = False, **kwargs: Any) -> Any:
        if use_stateful_dataloader and not cls.__dict__.get("_stateful_variant", False):
            cls = _variant(cls)
        return super().__new__(cls)

    base_dataloader = _Itself()

    @classmethod
    def _stateful_base(cls) -> type | None:
        """``StatefulDataLoader`` when this is a stateful variant, else ``None``."""
        return stateful_dataloader_class() if cls._stateful_variant else None
