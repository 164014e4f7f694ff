"""Accelerate's DeepSpeed helpers at ``drivetrain.utils``: regional compilation of an engine's
module, the CPU optimizer matching a torch optimizer, and the DeepSpeed launcher's command."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from drivetrain.plugin_api import ConfigError

from .compat import deepspeed_required


def compile_regions_deepspeed(module: Any, **compile_kwargs: Any) -> None:
    """Compile ``module``'s repeated blocks in place (``Module.compile``), or the whole module
    when it has none.

    An engine's module carries DeepSpeed's hooks and partitioned parameters, which a wrapper
    from ``torch.compile`` would hide; compiling in place keeps the module object (and its
    hooks) the engine holds.
    """
    from drivetrain.plugin_api import repeated_blocks as _repeated_blocks

    containers = [container for container in module.modules() if _repeated_blocks(container)]
    if not containers:
        module.compile(**compile_kwargs)
        return
    for container in containers:
        for block in container:
            block.compile(**compile_kwargs)


def _cpu_optimizer_class(optimizer: Any) -> tuple[Any, dict[str, Any]]:
    """DeepSpeed's CPU optimizer for ``optimizer``'s algorithm and the keywords it needs."""
    import torch

    name = type(optimizer).__name__
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)) or name in ("Adam", "AdamW"):
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        extra: dict[str, Any] = {"adamw_mode": isinstance(optimizer, torch.optim.AdamW) or name == "AdamW"}
        if "betas" in optimizer.defaults:
            extra["betas"] = optimizer.defaults["betas"]
        return DeepSpeedCPUAdam, extra
    if isinstance(optimizer, torch.optim.Adagrad):
        from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad

        return DeepSpeedCPUAdagrad, {}
    if name.startswith("Lion"):  # bitsandbytes' Lion variants and lion-pytorch
        from deepspeed.ops.lion import DeepSpeedCPULion

        return DeepSpeedCPULion, {"betas": optimizer.defaults["betas"]} if "betas" in optimizer.defaults else {}
    raise ConfigError(f"DeepSpeed has no CPU optimizer for {name}; use Adam, AdamW, Adagrad or Lion, or let the "
                      "DeepSpeed config define the optimizer")


@deepspeed_required
def map_pytorch_optim_to_deepspeed(optimizer: Any) -> Any:
    """The DeepSpeed CPU optimizer (``deepspeed.ops``) doing ``optimizer``'s algorithm over the
    same parameter groups, with its learning rate and weight decay: what ZeRO-Offload steps fastest."""
    cls, extra = _cpu_optimizer_class(optimizer)
    defaults = {key: optimizer.defaults[key] for key in ("lr", "weight_decay") if key in optimizer.defaults}
    return cls(optimizer.param_groups, **defaults, **extra)


def prepare_deepspeed_cmd_env(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The command line of DeepSpeed's launcher for the job ``args`` describes (the options of
    ``drivetrain launch``), and the environment to run it with: the run's resolved choice, as
    every process gets it, and ``DS_ACCELERATOR`` for the run's platform.

    Unlike ``drivetrain launch``, nothing is written: variables reach remote hosts only through
    the user's own ``.deepspeed_env`` file.
    """
    from drivetrain.plugin_api import prepare_multi_gpu_env

    from .launcher import runner_arguments
    from .options import deepspeed_accelerator

    env = prepare_multi_gpu_env(args)  # completes args as `drivetrain launch` does (selection, nproc_per_node)
    env.setdefault("DS_ACCELERATOR", deepspeed_accelerator(args.selection.platform.name))
    command = [sys.executable, "-u", "-m", "deepspeed.launcher.runner", *runner_arguments(args)]
    return command, env
