"""``accelerate.commands.menu.input``: methods of a menu class bound to the keys that run them."""

from __future__ import annotations

from typing import Any, Callable

from .keymap import get_character


def mark(key: int) -> Callable[[Callable], Callable]:
    """Bind the decorated method to ``key``."""
    return mark_multiple(key)


def mark_multiple(*keys: int) -> Callable[[Callable], Callable]:
    """Bind the decorated method to each of ``keys``."""
    def decorator(func: Callable) -> Callable:
        func.handle_key = [*getattr(func, "handle_key", []), *keys]  # type: ignore[attr-defined]
        return func

    return decorator


class KeyHandler(type):
    """A metaclass collecting the marked methods into ``key_handler``, with ``handle_input`` reading a key."""

    def __new__(cls, name: str, bases: tuple, attrs: dict[str, Any]) -> type:
        new_cls = super().__new__(cls, name, bases, attrs)
        new_cls.key_handler = dict(getattr(new_cls, "key_handler", {}))
        for value in attrs.values():
            for key in getattr(value, "handle_key", []):
                new_cls.key_handler[key] = value
        new_cls.handle_input = KeyHandler.handle_input
        return new_cls

    @staticmethod
    def handle_input(cls: Any) -> Any:
        """Read one key and run the method bound to it (``None`` when none is)."""
        char = get_character()
        key = ord(char) if isinstance(char, str) else char
        handler = cls.key_handler.get(key)
        if handler is None:
            return None
        cls.current_selection = key
        return handler(cls)


def register(cls: type) -> type:
    """``cls`` rebuilt with :class:`KeyHandler` as its metaclass."""
    return KeyHandler(cls.__name__, cls.__bases__, cls.__dict__.copy())
