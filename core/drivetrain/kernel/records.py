"""Frozen records: dataclasses whose methods are shared instead of generated per class.

Every process reads the descriptors and plugin records at start-up, before anything else
runs. ``@dataclass(frozen=True)`` writes and compiles six methods for each class it makes
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``),
which made defining the descriptors cost more than the rest of their module and a tenth of
``drivetrain plugins list``. :func:`frozen_record` keeps the class a dataclass (``fields``,
``replace``, ``asdict``, ``is_dataclass`` work as before, and type checkers see the usual
``__init__``) and gives it these methods once, from :class:`FrozenRecord`, reading the fields
at call time: they behave as the generated ones do, a few microseconds slower per object.
"""

from __future__ import annotations

from dataclasses import MISSING, FrozenInstanceError, Field, dataclass, field, fields
from typing import Any, Callable, TypeVar

try:
    from typing import dataclass_transform
except ImportError:  # Python 3.10: type checkers read typing_extensions' name; nothing runs
    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda decorated: decorated

__all__ = ["FrozenRecord", "frozen_record"]

T = TypeVar("T")


class FrozenRecord:
    """What ``@dataclass(frozen=True)`` generates, written once for every record."""

    __slots__ = ()
    __record_fields__: tuple[Field, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        own = self.__record_fields__
        cls = type(self).__name__
        if len(args) > len(own):
            raise TypeError(f"{cls}() takes {len(own)} positional arguments but {len(args)} were given")
        for index, spec in enumerate(own):
            if index < len(args):
                if spec.name in kwargs:
                    raise TypeError(f"{cls}() got multiple values for argument {spec.name!r}")
                value = args[index]
            elif spec.name in kwargs:
                value = kwargs.pop(spec.name)
            elif spec.default is not MISSING:
                value = spec.default
            elif spec.default_factory is not MISSING:
                value = spec.default_factory()
            else:
                raise TypeError(f"{cls}() missing 1 required argument: {spec.name!r}")
            object.__setattr__(self, spec.name, value)
        if kwargs:
            raise TypeError(f"{cls}() got an unexpected keyword argument {next(iter(kwargs))!r}")
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, spec.name) for spec in fields(self) if spec.compare)

    def __repr__(self) -> str:
        shown = ", ".join(f"{spec.name}={getattr(self, spec.name)!r}" for spec in fields(self) if spec.repr)
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def frozen_record(cls: type[T]) -> type[T]:
    """Make ``cls`` (a subclass of :class:`FrozenRecord`) a frozen dataclass with shared methods."""
    made = dataclass(init=False, repr=False, eq=False)(cls)
    made.__record_fields__ = tuple(spec for spec in fields(made) if spec.init)
    # It is frozen, through FrozenRecord: a plugin's ``@dataclass(frozen=True)`` subclass is
    # accepted, and a mutable one refused, as with a class that dataclass made frozen.
    made.__dataclass_params__.frozen = True
    return made
