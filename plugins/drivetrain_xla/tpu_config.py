"""``drivetrain tpu-config``: run setup commands on every VM of a TPU pod (``gcloud ... ssh``).

The TPU's name, zone and the commands come from the options or from the config file's
``tpu_name``, ``tpu_zone``, ``commands`` and ``command_file`` keys. ``--debug`` prints the
``gcloud`` command instead of running it.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import subprocess
from typing import Any, Sequence

from drivetrain.plugin_api import ConfigError

logger = logging.getLogger(__name__)


def _add(holder: Any) -> None:
    parser = holder.add_parser("tpu-config", help="run setup commands on every VM of a TPU pod",
                               description="Run commands on all VMs of a TPU pod through `gcloud compute tpus "
                                           "tpu-vm ssh`; values not given come from the config file.")
    parser.add_argument("--config-file", "--config_file", default=None, help="config file to read defaults from")
    parser.add_argument("--tpu-name", "--tpu_name", default=None, help="name of the TPU")
    parser.add_argument("--tpu-zone", "--tpu_zone", default=None, help="zone of the TPU")
    parser.add_argument("--use-alpha", "--use_alpha", action="store_true", help="use `gcloud alpha`")
    parser.add_argument("--command-file", "--command_file", default=None, help="file with one command per line")
    parser.add_argument("--command", action="append", nargs="+", default=None,
                        help="a command to run (repeat for several)")
    parser.add_argument("--install-drivetrain", "--install_drivetrain", "--install-accelerate",
                        "--install_accelerate", dest="install_drivetrain", action="store_true",
                        help="install drivetrain on the pod first")
    parser.add_argument("--drivetrain-version", "--drivetrain_version", "--accelerate-version",
                        "--accelerate_version", dest="drivetrain_version", default="latest",
                        help="version to install: latest or a version number")
    parser.add_argument("--debug", action="store_true", help="print the command instead of running it")
    parser.set_defaults(handler=tpu_command_launcher)


def tpu_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    if subparsers is None:
        holder = argparse.ArgumentParser(prog="drivetrain").add_subparsers()
        _add(holder)
        parser = holder.choices["tpu-config"]
        parser.prog = "drivetrain tpu-config"
        return parser
    _add(subparsers)
    return subparsers.choices["tpu-config"]


def _from_config(path: str | None) -> dict[str, Any]:
    # Read the file's keys as they are: this command runs where torch_xla is not installed.
    from pathlib import Path

    import yaml

    from drivetrain.plugin_api import default_config_path

    source = Path(path) if path else default_config_path()
    if not source.is_file():
        if path:
            raise ConfigError(f"{path}: no such config file")
        return {}
    values = yaml.safe_load(source.read_text()) or {}
    return {key: value for key, value in values.items() if value not in (None, [], "")}


def _install_line(version: str) -> str:
    if version == "latest":
        return "pip install drivetrain -U"
    return f"pip install drivetrain=={version}"


def gcloud_command(args: argparse.Namespace) -> list[str]:
    """The ``gcloud`` command line ``tpu-config`` runs for ``args``."""
    defaults = _from_config(args.config_file)
    name = args.tpu_name or defaults.get("tpu_name")
    zone = args.tpu_zone or defaults.get("tpu_zone")
    if not name or not zone:
        raise ConfigError("tpu-config needs --tpu-name and --tpu-zone (or tpu_name and tpu_zone in the config file)")
    commands: list[str] = []
    if args.install_drivetrain:
        commands.append(_install_line(args.drivetrain_version))
    command_file = args.command_file or defaults.get("command_file")
    if args.command:
        commands.extend(" ".join(parts) for parts in args.command)
    elif command_file:
        with open(command_file) as handle:
            commands.extend(line.strip() for line in handle if line.strip())
    else:
        commands.extend(defaults.get("commands") or [])
    if not commands:
        raise ConfigError("tpu-config has no command to run: pass --command, --command-file or --install-drivetrain")
    gcloud = ["gcloud", "alpha"] if args.use_alpha else ["gcloud"]
    return [*gcloud, "compute", "tpus", "tpu-vm", "ssh", name, "--zone", zone,
            "--command", "; ".join(["cd /usr/share", *commands]), "--worker", "all"]


def tpu_command_launcher(args: argparse.Namespace) -> int:
    command = gcloud_command(args)
    if args.debug:
        # Words joined by spaces, as Accelerate prints it (scripts read this line); the shell
        # quoting of the remote command is in the debug log.
        print(f"Running {' '.join(command)}")
        logger.debug("as a shell line: %s", shlex.join(command))
        return 0
    return subprocess.run(command).returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = tpu_command_parser()
    return tpu_command_launcher(parser.parse_args(argv))
