"""``accelerate.commands.utils``: an ``argparse`` parser taking ``--an_option`` as ``--an-option`` too.

:class:`CustomArgumentParser` is drivetrain's launch parser base (both spellings of every
option, help showing one), and records on the namespace, as Accelerate's does, which options
were given on the command line (``namespace.nondefault``).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..cli.launch_parser import LaunchHelpFormatter, _BothSpellings


class _Recorded(argparse.Action):
    """Stores like ``store``/``store_const`` and adds ``dest`` to ``namespace.nondefault``."""

    def __init__(self, option_strings: list[str], dest: str, const: Any = None, nargs: Any = None,
                 store_const: bool = False, **kwargs: Any) -> None:
        self._store_const = store_const
        super().__init__(option_strings, dest, nargs=0 if store_const else nargs, const=const, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, self.const if self._store_const else values)
        if not hasattr(namespace, "nondefault"):
            namespace.nondefault = set()
        namespace.nondefault.add(self.dest)


def _recorded(kwargs: dict[str, Any]) -> dict[str, Any]:
    action = kwargs.get("action", "store")
    if action == "store":
        kwargs["action"] = _Recorded
    elif action in ("store_true", "store_false"):
        kwargs.update(action=_Recorded, store_const=True, const=action == "store_true",
                      default=kwargs.get("default", action == "store_false"))
    return kwargs


class CustomArgumentGroup(_BothSpellings, argparse._ArgumentGroup):
    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        return super().add_argument(*args, **_recorded(kwargs))


class CustomArgumentParser(_BothSpellings, argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", LaunchHelpFormatter)  # each option under one spelling
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        return super().add_argument(*args, **_recorded(kwargs))

    def add_argument_group(self, *args: Any, **kwargs: Any) -> CustomArgumentGroup:
        group = CustomArgumentGroup(self, *args, **kwargs)
        self._action_groups.append(group)
        return group
