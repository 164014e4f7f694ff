"""The argument parser of ``drivetrain launch``: Accelerate's spellings, one entry per option.

Every long option is accepted with underscores and with hyphens (``--num_processes`` and
``--num-processes``), whichever spelling the code that adds it (the core or a plugin) used.
``--help`` shows the underscore spelling only, Accelerate's, so each option is listed once.
Flags that choose a backend (``--multi_gpu``, ``--use_fsdp``, ...) are :class:`BackendFlag`
actions: the flag's own attribute is ``True`` (``args.use_fsdp``, default ``False``) and the
request it stands for (``args.strategy = "fsdp"``) is set with it.
"""

from __future__ import annotations

import argparse
import copy
from typing import Any


def _spellings(names: tuple[str, ...]) -> tuple[list[str], set[str]]:
    """All names to register (underscore spellings first) and those ``--help`` leaves out."""
    shown: list[str] = []
    hidden: list[str] = []
    for name in names:
        if not name.startswith("--"):
            shown.append(name)
            continue
        underscored = "--" + name[2:].replace("-", "_")
        hyphenated = "--" + name[2:].replace("_", "-")
        shown.append(underscored)
        if hyphenated != underscored:
            hidden.append(hyphenated)
    ordered = list(dict.fromkeys(shown + hidden))
    return ordered, set(hidden) - set(shown)


class _BothSpellings:
    """``add_argument`` of the launch parser and its groups."""

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        if not names or not names[0].startswith("-"):
            return super().add_argument(*names, **kwargs)  # type: ignore[misc]
        ordered, hidden = _spellings(names)
        action = super().add_argument(*ordered, **kwargs)  # type: ignore[misc]
        action.hidden_spellings = hidden
        return action


class _Group(_BothSpellings, argparse._ArgumentGroup):
    pass


class LaunchHelpFormatter(argparse.HelpFormatter):
    """Lists each option under its underscore spelling only."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        hidden = getattr(action, "hidden_spellings", None)
        if hidden:
            action = copy.copy(action)
            action.option_strings = [name for name in action.option_strings if name not in hidden]
        return super()._format_action_invocation(action)


class LaunchParser(_BothSpellings, argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", LaunchHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)  # a prefix of one spelling must not pick another option
        super().__init__(*args, **kwargs)

    def add_argument_group(self, *args: Any, **kwargs: Any) -> argparse._ArgumentGroup:
        group = _Group(self, *args, **kwargs)
        self._action_groups.append(group)
        return group


class BackendFlag(argparse.Action):
    """A flag that chooses a backend, as Accelerate's ``--use_deepspeed`` does.

    Use ``action=BackendFlag.choosing("strategy", "deepspeed")``; the parsed arguments then have
    ``use_deepspeed`` (``False`` unless given) and, when given, ``strategy == "deepspeed"``. A
    subclass may override :meth:`choose` (to check the backend first, for instance).
    """

    request = ""
    value = ""

    def __init__(self, option_strings: list[str], dest: str, default: Any = False, help: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help, **kwargs)

    @classmethod
    def choosing(cls, request: str, value: str) -> type[BackendFlag]:
        """A flag class that sets ``args.<request>`` to ``value``."""
        return type(f"Choose_{request}_{value}", (cls,), {"request": request, "value": value})

    def choose(self, namespace: argparse.Namespace, option_string: str | None) -> None:
        setattr(namespace, self.request, self.value)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, True)
        if self.request:
            self.choose(namespace, option_string)
