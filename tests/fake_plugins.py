"""In-process plugins for unit tests: a module object and an entry point that loads it."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class FakeDist:
    name: str
    version: str = "1.0"


@dataclass
class FakeEntryPoint:
    """Quacks like importlib.metadata.EntryPoint; ``load`` returns the module or raises."""

    name: str
    value: str
    dist: FakeDist
    loader: Callable[[], Any]

    def load(self) -> Any:
        return self.loader()


def fake_plugin(name: str, dist: str = "someone-else", **attributes: Any) -> FakeEntryPoint:
    """An entry point for a module named ``fake_<name>`` with the given attributes."""
    module = types.ModuleType(f"fake_{name}")
    for key, value in attributes.items():
        setattr(module, key, value)
    sys.modules[module.__name__] = module
    return FakeEntryPoint(name, module.__name__, FakeDist(dist), lambda: module)


def failing_plugin(name: str, error: BaseException) -> FakeEntryPoint:
    def load():
        raise error

    return FakeEntryPoint(name, f"fake_{name}", FakeDist("someone-else"), load)
