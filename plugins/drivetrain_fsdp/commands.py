"""The fsdp plugin's ``merge-weights`` command with Accelerate's function names
(``accelerate.commands.merge``); ``to-fsdp2`` is in :mod:`drivetrain_fsdp.to_fsdp2`."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from drivetrain.plugin_api import ConfigError

from .merge import _run as _run_merge
from .merge import add_merge_command


def _standalone_or_sub(add: Any, name: str, subparsers: Any) -> argparse.ArgumentParser:
    if subparsers is None:
        holder = argparse.ArgumentParser(prog="drivetrain").add_subparsers()
        add(holder)
        parser = holder.choices[name]
        parser.prog = f"drivetrain {name}"
        return parser
    add(subparsers)
    return subparsers.choices[name]


# ------------------------------------------------------------------------------- merge


def merge_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    return _standalone_or_sub(add_merge_command, "merge-weights", subparsers)


def merge_command(args: argparse.Namespace) -> int:
    return _run_merge(args)


def merge_main(argv: Sequence[str] | None = None) -> int:
    """The ``drivetrain-merge-weights`` console script."""
    parser = merge_command_parser()
    parser.prog = "drivetrain-merge-weights"
    try:
        return merge_command(parser.parse_args(argv))
    except ConfigError as exc:
        print(f"drivetrain-merge-weights: error: {exc}", file=sys.stderr)
        return 2
