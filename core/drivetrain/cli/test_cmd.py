"""``drivetrain test``: launch the built-in distributed self-test with the current config."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

SELF_TEST = "drivetrain.cli.self_test"
SUCCESS = "Test is a success! You are ready for your distributed training!"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    # Listed for --help only: main() hands `test` its raw arguments (see run()).
    subparsers.add_parser(
        "test", help="launch a short distributed self-test with the current config and report pass/fail",
        description="Runs `drivetrain launch [OPTIONS] -m drivetrain.cli.self_test`: every process checks "
                    "its rank, device, the collectives and one training step. Options are those of "
                    "`drivetrain launch` (--config-file, --num-processes, --cpu, ...).")


def run(argv: Sequence[str]) -> int:
    argv = list(argv)
    if argv[:1] in (["-h"], ["--help"]):
        print("usage: drivetrain test [--config-file PATH] [other `drivetrain launch` options]\n\n"
              "Launch a short distributed self-test with the current config and report pass/fail.")
        return 0
    from ..kernel.errors import DrivetrainError
    from .launch_cmd import run as launch

    print("Running: " + " ".join(["drivetrain", "launch", *argv, "-m", SELF_TEST]), flush=True)
    try:
        code = launch([*argv, "-m", SELF_TEST])
    except DrivetrainError as exc:
        print(f"drivetrain test: FAILED: {exc}", file=sys.stderr)
        return 1
    if code == 0:
        print(SUCCESS)
        return 0
    print(f"drivetrain test: FAILED (exit code {code}); the output above names the failing process. "
          "Check the config with `drivetrain env`.", file=sys.stderr)
    return 1
