"""The fsdp plugin's commands with Accelerate's function names: ``merge-weights`` and ``to-fsdp2``.

``to-fsdp2`` rewrites a config file written for FSDP1 into FSDP2's keys: FSDP2 replaces the
sharding strategy by ``fsdp_reshard_after_forward`` and has no use for the wrapper's
prefetch, ``use_orig_params`` and ``sync_module_states`` options.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import yaml

from drivetrain.plugin_api import ConfigError

from .merge import _run as _run_merge
from .merge import add_merge_command

SECTION = "fsdp_config"

#: FSDP1 sharding strategies and whether the FSDP2 equivalent reshards after forward.
RESHARD_AFTER_FORWARD = {"FULL_SHARD": True, "SHARD_GRAD_OP": False, "HYBRID_SHARD": True,
                         "HYBRID_SHARD_ZERO2": False, "NO_SHARD": False}
#: FSDP1 options FSDP2 does without (it always prefetches and keeps the model's parameters).
DROPPED = ("fsdp_backward_prefetch", "fsdp_forward_prefetch", "fsdp_use_orig_params", "fsdp_sync_module_states")


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


# ----------------------------------------------------------------------------- to-fsdp2


def convert_to_fsdp2(section: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """An FSDP2 ``fsdp_config`` section from an FSDP1 one, and one line per change made."""
    converted = dict(section)
    changes = []
    strategy = converted.pop("fsdp_sharding_strategy", None)
    if strategy is not None:
        name = str(strategy).upper()
        if name.isdigit():  # Accelerate's files may store the strategy as its number (1 = FULL_SHARD)
            name = list(RESHARD_AFTER_FORWARD)[int(name) - 1] if 0 < int(name) <= 5 else name
        if name not in RESHARD_AFTER_FORWARD:
            raise ConfigError(f"fsdp_sharding_strategy {strategy!r} is not an FSDP1 strategy; "
                              f"use one of {', '.join(RESHARD_AFTER_FORWARD)}")
        converted.setdefault("fsdp_reshard_after_forward", RESHARD_AFTER_FORWARD[name])
        changes.append(f"fsdp_sharding_strategy {name} -> fsdp_reshard_after_forward "
                       f"{converted['fsdp_reshard_after_forward']}")
    for key in DROPPED:
        if key in converted:
            changes.append(f"removed {key} (FSDP2 has no such option)")
            del converted[key]
    converted["fsdp_version"] = 2
    return converted, changes


def convert_config_to_fsdp2(config: dict[str, Any]) -> dict[str, Any]:
    """A whole config file's contents with its ``fsdp_config`` converted to FSDP2 (other keys kept)."""
    converted = dict(config)
    converted[SECTION], _changes = convert_to_fsdp2(dict(config.get(SECTION) or {}))
    return converted


def to_fsdp2_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    def add(holder: Any) -> None:
        parser = holder.add_parser("to-fsdp2", help="rewrite an FSDP1 config file for FSDP2",
                                   description="Rewrite the fsdp_config of a config file written for FSDP1 into "
                                               "FSDP2's keys (fsdp_version: 2).")
        parser.add_argument("--config-file", "--config_file", required=True, help="the FSDP1 config file")
        parser.add_argument("--output-file", "--output_file", required=True, help="where to write the result")
        parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
        parser.set_defaults(handler=to_fsdp2_command)

    return _standalone_or_sub(add, "to-fsdp2", subparsers)


def to_fsdp2_command(args: argparse.Namespace) -> int:
    source, target = Path(args.config_file), Path(args.output_file)
    if not source.is_file():
        raise ConfigError(f"{source}: no such config file")
    if target.exists() and not args.overwrite:
        raise ConfigError(f"{target} exists; pass --overwrite to replace it")
    config = yaml.safe_load(source.read_text()) or {}
    section = config.get(SECTION)
    if not isinstance(section, dict):
        raise ConfigError(f"{source} has no {SECTION} section: nothing to convert")
    if int(section.get("fsdp_version", 1)) == 2:
        raise ConfigError(f"{source} is already an FSDP2 config (fsdp_version: 2)")
    config[SECTION], changes = convert_to_fsdp2(section)
    target.write_text(yaml.safe_dump(config, sort_keys=False))
    for line in changes:
        print(line)
    print(f"wrote {target}")
    return 0
