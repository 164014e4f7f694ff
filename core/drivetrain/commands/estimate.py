"""``accelerate.commands.estimate``: ``drivetrain estimate-memory``."""

from __future__ import annotations

import argparse
from typing import Any

from ..cli import estimate_cmd
from ._parsers import command_parser

verify_on_hub = estimate_cmd.verify_on_hub


def create_empty_model(model_name: str, library_name: str | None = None, trust_remote_code: bool = False,
                       access_token: str | None = None) -> Any:
    """The model ``model_name`` names, on the meta device; a name that is not local is checked
    with this module's ``verify_on_hub`` (gated or missing: an ``OSError``)."""
    return estimate_cmd.build_empty_model(model_name, library_name, trust_remote_code, access_token,
                                          verify=verify_on_hub)


def add_timm_hub_prefix(model_name: str) -> str:
    """A Hub repository id (``owner/name``) with the ``hf-hub:`` source prefix ``timm`` expects;
    a bare architecture name, or a name that already has a source prefix, is returned as it is."""
    if ":" in model_name or "/" not in model_name:
        return model_name
    return f"hf-hub:{model_name}"


def gather_data(args: argparse.Namespace) -> list[list[Any]]:
    """One row per requested dtype: ``[dtype, largest layer bytes, total bytes, {"adam": bytes to
    train}]``, the numbers ``drivetrain estimate-memory`` prints."""
    model = create_empty_model(args.model_name, args.library_name, getattr(args, "trust_remote_code", False),
                               getattr(args, "access_token", None))
    rows = estimate_cmd.estimate(model, list(args.dtypes))
    return [[row["dtype"], row["largest_layer"], row["total_size"], {"adam": row["training_with_adam"]}]
            for row in rows]


def estimate_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    return command_parser(estimate_cmd.add_parser, "estimate-memory", subparsers)


def estimate_command(args: argparse.Namespace) -> int:
    return estimate_cmd.run_estimate(args, verify=verify_on_hub)


def main() -> int:
    """The ``drivetrain-estimate-memory`` console script."""
    parser = estimate_command_parser()
    return estimate_command(parser.parse_args())


if __name__ == "__main__":  # ``python -m``, as Accelerate's module runs
    import sys

    from ._parsers import run_as_main

    sys.exit(run_as_main("estimate-memory"))
