"""Command-line hooks: options and environment of ``drivetrain launch``, and sub-commands.

Part of :mod:`drivetrain.hookspecs`, which collects every family; read its docstring for the
kinds of hook and the calling conventions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..kernel.descriptors import hookspec

if TYPE_CHECKING:  # pragma: no cover - names for the type hints only
    import argparse


@hookspec
def drivetrain_add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this plugin's options to ``drivetrain launch``.

    The parsed values reach the children through ``drivetrain_launch_environment``.

    :param parser: The launch command's parser. Add one argument group named after the
        plugin (``parser.add_argument_group("FSDP")``). Spell options with dashes; drivetrain
        accepts the underscore spelling too.
    :return: Ignored.

    Command-line hook, *broadcast*, API 1.0.
    """


@hookspec
def drivetrain_launch_environment(args: argparse.Namespace) -> dict[str, str] | None:
    """Turn parsed launch arguments into environment variables for the children.

    :param args: The parsed ``drivetrain launch`` namespace, already merged with the config
        file (command line wins).
    :return: A mapping of variables to set in every child (``{"FSDP_SHARDING_STRATEGY":
        "FULL_SHARD"}``), or ``None`` for none. All answers are merged; two plugins setting
        one variable to different values is an error.

    Command-line hook, *collected*, API 1.0.
    """


@hookspec
def drivetrain_add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add sub-commands to the ``drivetrain`` command line (``merge-weights``, ...).

    :param subparsers: The object ``ArgumentParser.add_subparsers`` returned. Each new
        parser must ``set_defaults(handler=callable)``; the callable receives the parsed
        namespace and returns an exit code.
    :return: Ignored.

    Command-line hook, *broadcast*, API 1.0.
    """
