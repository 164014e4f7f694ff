"""``accelerate.commands.config.config_utils``: the helpers Accelerate's questionnaire is built from.

drivetrain's own questions are in :mod:`drivetrain.config.questionnaire`; these keep code that
asks its own questions with Accelerate's helpers working. A menu is numbered from 0, and the
``_convert_*`` functions turn the chosen number into the value it stands for. The lists are
what is installed here: precisions and distributed types come from the plugins, and
``DYNAMO_BACKENDS`` from torch (read on first use, as it imports torch).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Sequence

from ...kernel.contributed import surface_getattr
from ...selection.enums import (
    ComputeEnvironment,
    DistributedType,
    DynamoBackend,
    PrecisionType,
    SageMakerDistributedType,
)


# Accelerate's list of dynamo backends, from the enumeration plugins add members to
__getattr__ = surface_getattr(__name__, computed={
    "DYNAMO_BACKENDS": lambda: [member.value for member in DynamoBackend if member.value != "NO"]})


def _ask_field(input_text: str, convert_value: Callable[[str], Any] | None = None, default: Any = None,
               error_message: str | None = None) -> Any:
    """Ask until an answer converts; an empty answer takes ``default`` when there is one."""
    while True:
        answer = input(input_text)
        if answer == "" and default is not None:
            return default
        try:
            return convert_value(answer) if convert_value is not None else answer
        except Exception:
            if error_message is not None:
                print(error_message)


def _ask_options(input_text: str, options: Sequence[Any] = (), convert_value: Callable[[int], Any] | None = None,
                 default: int = 0) -> Any:
    """Show ``options`` numbered from 0 and ask for one; the number goes through ``convert_value``."""
    print(input_text)
    for number, option in enumerate(options):
        print(f"  {number}) {option}")

    def chosen(answer: str) -> int:
        number = int(answer)
        if not 0 <= number < len(options):
            raise ValueError(answer)
        return number

    number = _ask_field(f"Your choice [{default}]: ", chosen, default=default,
                        error_message=f"Please answer a number from 0 to {len(options) - 1}.")
    return convert_value(number) if convert_value is not None else number


def _convert_compute_environment(value: int | str) -> ComputeEnvironment:
    return ComputeEnvironment(list(ComputeEnvironment)[int(value)].value)


def _convert_distributed_mode(value: int | str) -> DistributedType:
    """The distributed type at ``value`` in the list of those the installed plugins know."""
    return list(DistributedType)[int(value)]


def _convert_dynamo_backend(value: int | str) -> str:
    return DynamoBackend(__getattr__("DYNAMO_BACKENDS")[int(value)]).value


def _convert_mixed_precision(value: int | str) -> PrecisionType:
    return list(PrecisionType)[int(value)]


def _convert_sagemaker_distributed_mode(value: int | str) -> SageMakerDistributedType:
    return list(SageMakerDistributedType)[int(value)]


def _convert_yes_no_to_bool(value: str) -> bool:
    answers = {"yes": True, "y": True, "no": False, "n": False}
    key = value.strip().lower()
    if key not in answers:
        raise ValueError(f"{value!r} is not yes or no")
    return answers[key]


class SubcommandHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help of a command with actions: the usage line leaves out the ``ACTION ...`` placeholder,
    which the list of actions below it explains."""

    def _format_usage(self, usage: Any, actions: Any, groups: Any, prefix: str | None) -> str:
        shown = [action for action in actions if not isinstance(action, argparse._SubParsersAction)]
        return super()._format_usage(usage, shown, groups, prefix)
