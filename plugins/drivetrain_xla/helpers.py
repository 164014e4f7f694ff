"""Accelerate's XLA helpers: ``install_xla``, ``prepare_tpu`` and the bf16 variables.

None of them imports torch_xla: they run where it is not installed yet.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any

from drivetrain.plugin_api import ConfigError

#: what torch_xla reads: every float tensor in bfloat16, or (downcast) float64 in float32
USE_BF16 = "XLA_USE_BF16"
DOWNCAST_BF16 = "XLA_DOWNCAST_BF16"


def _yes(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "yes", "true", "y", "on")
    return bool(value)


def bf16_environment(mixed_precision: str | None, downcast_bf16: Any) -> dict[str, str]:
    """The variables that make torch_xla compute in bfloat16 for ``mixed_precision="bf16"``:
    ``XLA_DOWNCAST_BF16=1`` with ``downcast_bf16`` (float64 kept as float32), ``XLA_USE_BF16=1``
    otherwise; nothing for another precision."""
    if str(mixed_precision or "no").lower() != "bf16":
        return {}
    return {DOWNCAST_BF16: "1"} if _yes(downcast_bf16) else {USE_BF16: "1"}


def prepare_tpu(args: argparse.Namespace, current_env: dict[str, str], pod: bool = False
                ) -> tuple[argparse.Namespace, dict[str, str]]:
    """Add to ``current_env`` what an XLA launch of ``args`` needs: the bf16 variables (with
    ``args.downcast_bf16``) and the debug flag. With ``pod``, the options only the launching
    machine uses (``--vm``, ``--tpu-use-cluster``, ...) are cleared from ``args``, since the
    command is repeated on every VM of the pod. Returns ``(args, current_env)``."""
    current_env.update(bf16_environment(getattr(args, "mixed_precision", None), getattr(args, "downcast_bf16", None)))
    if getattr(args, "debug", None):
        current_env["DRIVETRAIN_DEBUG_MODE"] = "true"
        current_env["ACCELERATE_DEBUG_MODE"] = "true"
    if pod:
        for name in ("tpu_vm", "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "vm", "env", "tpu_cluster"):
            if hasattr(args, name):
                setattr(args, name, None)
    return args, current_env


def install_xla_command(upgrade: bool = False, torch_version: str | None = None) -> list[str]:
    """The pip command that installs the torch_xla release made for the installed torch."""
    if torch_version is None:
        from importlib import metadata

        try:
            torch_version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            raise ConfigError("install_xla needs torch installed first (pip install torch)") from None
    release = torch_version.split("+")[0]
    command = [sys.executable, "-m", "pip", "install"]
    if upgrade:
        command.append("--upgrade")
    return [*command, f"torch-xla=={release}"]  # torch_xla pins the torch it was built for


def install_xla(upgrade: bool = False) -> None:
    """Install the torch_xla release that matches the installed torch (Accelerate's helper for
    notebooks). Fails with pip's exit code when pip fails."""
    command = install_xla_command(upgrade)
    result = subprocess.run(command)
    if result.returncode != 0:
        raise ConfigError(f"`{' '.join(command[2:])}` failed (exit code {result.returncode}); torch_xla publishes "
                          "one release per torch release: install the torch it names, in an environment of its own")
