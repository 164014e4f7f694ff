"""``drivetrain launch --tpu``: start a script's main function through ``xmp.spawn`` on this
machine, or (``--tpu-use-cluster``) the same launch on every VM of a TPU pod through gcloud."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

from drivetrain.plugin_api import LaunchError

from .helpers import prepare_tpu


def applies(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "tpu", None) or getattr(args, "tpu_use_cluster", None)
                or getattr(args, "platform", None) == "xla")


def main_function(args: argparse.Namespace) -> str:
    name = getattr(args, "main_training_function", None)
    config = getattr(args, "config", None)
    if not name and config is not None:
        name = getattr(config, "main_training_function", None)
    return name or "main"


def spawn_command(args: argparse.Namespace) -> list[str]:
    """The command that runs the script's main function on every device of this machine."""
    if args.no_python:
        raise LaunchError("drivetrain launch --tpu runs a Python function of the script; drop --no-python")
    target = ["--module", args.training_script] if args.module else ["--script", args.training_script]
    return [sys.executable, "-m", "drivetrain_xla.spawn", "--function", main_function(args),
            "--nprocs", str(args.num_processes or 1), *target, *args.training_script_args]


def _listed(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [part for part in value.split(",") if part]
    return [str(part) for item in value for part in str(item).split(",") if part]  # type: ignore[union-attr]


def pod_commands(args: argparse.Namespace) -> list[list[str]]:
    """The gcloud commands that repeat this launch on the VMs of a TPU pod: on every worker of
    the TPU (``tpu_name``, ``tpu_zone``), or on each Compute VM named by ``--vm``. Variables
    of ``--env`` (``NAME=value``) are set first; ``--tpu-use-sudo`` runs it through sudo."""
    config = getattr(args, "config", None)
    sections = getattr(config, "sections", {}) if config is not None else {}
    name, zone = sections.get("tpu_name"), sections.get("tpu_zone")
    if not zone:
        raise LaunchError("a TPU pod launch needs tpu_zone (and tpu_name) in the config file; see `drivetrain config`")
    inner = [sys.executable.rsplit("/", 1)[-1], "-m", "drivetrain", "launch", "--tpu",
             "--main-training-function", main_function(args)]
    if getattr(args, "mixed_precision", None):
        inner += ["--mixed-precision", str(args.mixed_precision)]
    if getattr(args, "downcast_bf16", None) not in (None, False, "no"):
        inner.append("--downcast-bf16")
    inner += (["-m"] if args.module else []) + [args.training_script, *args.training_script_args]
    exports = [f"export {shlex.quote(pair)}" for pair in _listed(getattr(args, "tpu_env", None))]
    run = ("sudo " if getattr(args, "tpu_use_sudo", None) else "") + shlex.join(inner)
    remote = "; ".join([*exports, run])
    vms = _listed(getattr(args, "tpu_vm", None))
    if vms:
        return [["gcloud", "compute", "ssh", vm, "--zone", zone, "--command", remote] for vm in vms]
    if not name:
        raise LaunchError("a TPU pod launch needs tpu_name in the config file, or the pod's VMs with --vm")
    return [["gcloud", "compute", "tpus", "tpu-vm", "ssh", name, "--zone", zone, "--worker", "all",
             "--command", remote]]


def launch_xla(args: argparse.Namespace) -> int:
    if getattr(args, "platform", None) != "xla":
        raise LaunchError(f"--tpu needs the xla platform, but this launch resolved to {args.platform!r}: torch_xla "
                          "sees no TPU here (pass --platform xla, or set PJRT_DEVICE=CPU to run XLA on the host CPU)")
    pod = bool(getattr(args, "tpu_use_cluster", None))
    args, env = prepare_tpu(args, dict(os.environ), pod=False)
    if pod:
        started = [subprocess.Popen(command) for command in pod_commands(args)]  # every VM at once
        codes = [process.wait() for process in started]
        return next((code for code in codes if code), 0)
    return subprocess.run(spawn_command(args), env=env).returncode
