"""``drivetrain to-fsdp2``: rewrite a config file written for FSDP1 into FSDP2's keys.

FSDP2 replaces the sharding strategy by ``fsdp_reshard_after_forward`` and has no use for the
wrapper's prefetch, ``use_orig_params`` and ``sync_module_states`` options; every other key is
kept. This module is ``drivetrain.commands.to_fsdp2`` (Accelerate's ``accelerate.commands.to_fsdp2``)
while this plugin is installed.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from drivetrain.plugin_api import (
    ConfigError,
    ConfigFileNotFoundError,
    OutputExistsError,
    read_config_file,
    write_config_file,
)

from .commands import _standalone_or_sub

logger = logging.getLogger(__name__)

SECTION = "fsdp_config"

#: FSDP1 sharding strategies and whether the FSDP2 equivalent reshards after forward.
RESHARD_AFTER_FORWARD = {"FULL_SHARD": True, "SHARD_GRAD_OP": False, "HYBRID_SHARD": True,
                         "HYBRID_SHARD_ZERO2": False, "NO_SHARD": False}
#: FSDP1 options FSDP2 does without (it always prefetches and keeps the model's parameters).
DROPPED = ("fsdp_backward_prefetch", "fsdp_forward_prefetch", "fsdp_use_orig_params", "fsdp_sync_module_states")


def _reshards(value: Any, key: str) -> Any:
    """Whether FSDP2 reshards after forward for an FSDP1 strategy (a name, or its number 1-5 as
    older files store it); a boolean is already FSDP2's value."""
    if isinstance(value, bool):
        return value
    name = str(value).upper()
    if name.isdigit() and 0 < int(name) <= len(RESHARD_AFTER_FORWARD):
        name = list(RESHARD_AFTER_FORWARD)[int(name) - 1]
    if name not in RESHARD_AFTER_FORWARD:
        raise ConfigError(f"{key} {value!r} is not an FSDP1 strategy; use one of {', '.join(RESHARD_AFTER_FORWARD)}")
    return RESHARD_AFTER_FORWARD[name]


def convert_to_fsdp2(section: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """An FSDP2 ``fsdp_config`` section from an FSDP1 one, and one line per change made."""
    converted = dict(section)
    changes = []
    strategy = converted.pop("fsdp_sharding_strategy", None)
    if "fsdp_reshard_after_forward" in converted:  # files written for FSDP1 may hold a strategy name here
        converted["fsdp_reshard_after_forward"] = _reshards(converted["fsdp_reshard_after_forward"],
                                                            "fsdp_reshard_after_forward")
    if strategy is not None:
        converted.setdefault("fsdp_reshard_after_forward", _reshards(strategy, "fsdp_sharding_strategy"))
        changes.append(f"fsdp_sharding_strategy {str(strategy).upper()} -> fsdp_reshard_after_forward "
                       f"{converted['fsdp_reshard_after_forward']}")
    for key in DROPPED:
        if key in converted:
            changes.append(f"removed {key} (FSDP2 has no such option)")
            del converted[key]
    converted["fsdp_version"] = 2
    return converted, changes


def _is_fsdp2(section: dict[str, Any]) -> bool:
    return str(section.get("fsdp_version", 1)).strip() == "2"


def convert_config_to_fsdp2(config: dict[str, Any]) -> dict[str, Any]:
    """A whole config file's contents with its ``fsdp_config`` converted to FSDP2 (other keys
    kept). A config without an ``fsdp_config``, or one already for FSDP2, comes back unchanged."""
    section = config.get(SECTION)
    if not section:
        logger.info("the config has no %s: nothing to convert", SECTION)
        return dict(config)
    if _is_fsdp2(section):
        logger.warning("Config already specifies FSDP2, skipping conversion... (set fsdp_version to 1 and run "
                       "again if its keys are still FSDP1's)")
        return dict(config)
    converted = dict(config)
    converted[SECTION], _changes = convert_to_fsdp2(dict(section))
    return converted


def load_config(config_file: str | os.PathLike) -> dict[str, Any]:
    """The keys of ``config_file`` as written (read safely).

    Raises:
        ConfigFileNotFoundError: there is no such file.
        ConfigError: it is empty, unreadable or not a YAML/JSON mapping.
    """
    config = read_config_file(config_file)
    if not config:
        raise ConfigError(f"config file {config_file} is empty; name the FSDP1 config file to convert")
    return config


def to_fsdp2_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    def add(holder: Any) -> None:
        parser = holder.add_parser("to-fsdp2", help="rewrite an FSDP1 config file for FSDP2",
                                   description="Rewrite the fsdp_config of a config file written for FSDP1 into "
                                               "FSDP2's keys (fsdp_version: 2).")
        parser.add_argument("--config-file", "--config_file", required=True, help="the FSDP1 config file")
        parser.add_argument("--output-file", "--output_file", default=None,
                            help="where to write the result (with --overwrite and no output file: the config "
                                 "file itself)")
        parser.add_argument("--overwrite", action="store_true",
                            help="replace the output file if it exists, or rewrite the config file in place")
        parser.set_defaults(handler=to_fsdp2_command)

    return _standalone_or_sub(add, "to-fsdp2", subparsers)


def _target(args: argparse.Namespace) -> Path:
    """Where the converted file goes; every reason not to write is raised before anything is read."""
    source = Path(args.config_file)
    if not source.exists():
        raise ConfigFileNotFoundError(f"config file {source} not found; name an existing FSDP1 config file")
    if args.output_file is None:
        if not args.overwrite:
            raise ConfigError(f"to-fsdp2 needs --output_file PATH, or --overwrite to rewrite {source} in place")
        return source
    target = Path(args.output_file)
    if not args.overwrite and target.exists():
        raise OutputExistsError(f"output file {target} already exists; pass --overwrite to replace it")
    return target


def to_fsdp2_command(args: argparse.Namespace) -> int:
    target = _target(args)
    config = load_config(args.config_file)
    section = config.get(SECTION)
    if not isinstance(section, dict) or not section:
        raise ConfigError(f"{args.config_file} has no {SECTION} section: nothing to convert")
    changes: list[str] = []
    if _is_fsdp2(section):
        convert_config_to_fsdp2(config)  # warns, and the file is written unchanged
    else:
        config = dict(config)
        config[SECTION], changes = convert_to_fsdp2(section)
    write_config_file(config, target)
    for line in changes:
        print(line)
    print(f"wrote {target}")
    return 0
