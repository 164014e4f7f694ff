"""``drivetrain checkpoint export``: a checkpoint written for another library to resume.

``--format accelerate`` writes Accelerate's layout (flat ``model.safetensors``,
``optimizer.bin``, ``random_states_<rank>.pkl``...), which Accelerate's ``load_state`` reads: a
run that goes back to Accelerate continues where drivetrain stopped. The other direction needs
no command: drivetrain's ``load_state`` reads Accelerate's directories as they are.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

FORMATS = ("accelerate",)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("checkpoint", help="Convert save_state checkpoints for other libraries",
                                   description="Work with checkpoints written by save_state.")
    actions = parser.add_subparsers(dest="checkpoint_command", metavar="ACTION")
    export = actions.add_parser(
        "export", help="Write a checkpoint in another library's layout",
        description="Verify a drivetrain checkpoint and write it, in another library's layout, into a new directory.")
    export.add_argument("source", help="a directory written by drivetrain's save_state")
    export.add_argument("destination", help="a new (or empty) directory to write into")
    export.add_argument("--format", choices=FORMATS, required=True, help="the layout to write")
    export.set_defaults(handler=run_export)
    parser.set_defaults(handler=lambda _args: parser.print_help())


def run_export(args: argparse.Namespace) -> int:
    from ..services.checkpointing.accelerate_layout import export_checkpoint

    notes = export_checkpoint(Path(args.source), Path(args.destination))
    print(f"wrote {args.destination} in {args.format}'s layout")
    for note in notes:
        print(f"note: {note}")
    return 0
