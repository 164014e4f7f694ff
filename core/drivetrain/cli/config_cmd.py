"""``drivetrain config``: write the config file by answering questions, write a default one,
or bring an existing one up to date."""

from __future__ import annotations

import argparse
from pathlib import Path


def _config_file_option(parser: argparse.ArgumentParser, dest: str) -> None:
    parser.add_argument("--config-file", "--config_file", dest=dest, metavar="PATH",
                        help="where the file is (default: $DRIVETRAIN_CONFIG_FILE, else "
                             "$HF_HOME/drivetrain/ or $XDG_CONFIG_HOME/drivetrain/default_config.yaml)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    config = subparsers.add_parser(
        "config", help="write the config file `drivetrain launch` reads",
        description="Answer a few questions (on standard input) and write the config file. The questions "
                    "come from the core and from the installed plugins.")
    _config_file_option(config, "config_file")
    config.set_defaults(handler=run_questions, sub_config_file=None)
    actions = config.add_subparsers(dest="config_command", metavar="ACTION")
    default = actions.add_parser("default", help="write a config for this machine without asking anything")
    _config_file_option(default, "sub_config_file")
    default.add_argument("--mixed-precision", "--mixed_precision", default="no",
                         help="no, fp16, bf16 or another installed precision (default: no)")
    default.set_defaults(handler=run_default)
    update = actions.add_parser("update", help="rewrite an existing config with every current key, keeping "
                                               "its values")
    _config_file_option(update, "sub_config_file")
    update.set_defaults(handler=run_update)


def _path(args: argparse.Namespace) -> str | None:
    # parsers built by Accelerate's helpers (``default_command_parser``) have only ``config_file``
    return getattr(args, "sub_config_file", None) or getattr(args, "config_file", None)


def run_questions(args: argparse.Namespace) -> int:
    from ..config import config_from_dict, default_config_path
    from ..config.file import dump
    from ..config.questionnaire import run_questionnaire

    path = Path(_path(args)).expanduser() if _path(args) else default_config_path()
    data = run_questionnaire()
    config_from_dict(data, path=str(path))  # never write what cannot be read back
    dump(data, path)
    print(f"drivetrain config saved at {path}")
    return 0


def run_default(args: argparse.Namespace) -> int:
    from ..config import default_config_path, write_basic_config

    path = Path(_path(args)).expanduser() if _path(args) else default_config_path()
    written = write_basic_config(getattr(args, "mixed_precision", None) or "no", path)
    if written is False:
        return 1
    print(f"drivetrain config saved at {written}")
    return 0


def run_update(args: argparse.Namespace) -> int:
    from ..config import update_config

    path = update_config(_path(args))
    print(f"Successfully updated the configuration file at {path}")
    return 0
