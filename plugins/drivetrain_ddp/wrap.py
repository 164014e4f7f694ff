"""Wraps a model in DistributedDataParallel with the user's options and communication hook."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch.nn.parallel import DistributedDataParallel

from drivetrain.plugin_api import ConfigError

from .options import DDPCommunicationHookType, DistributedDataParallelKwargs


def wrap_ddp(model: torch.nn.Module, run: Any, options: DistributedDataParallelKwargs) -> DistributedDataParallel:
    kwargs = options.to_kwargs()
    device = run.state.device
    if device.type == "cpu":
        wrapped = DistributedDataParallel(model, **kwargs)
    else:
        wrapped = DistributedDataParallel(model, device_ids=[device.index], output_device=device.index, **kwargs)
    _register_comm_hook(wrapped, options, device)
    return wrapped


def _register_comm_hook(model: DistributedDataParallel, options: DistributedDataParallelKwargs,
                        device: torch.device) -> None:
    hook_type = DDPCommunicationHookType(options.comm_hook)
    if hook_type is DDPCommunicationHookType.NO:
        return
    power_sgd = hook_type in (DDPCommunicationHookType.POWER_SGD, DDPCommunicationHookType.BATCHED_POWER_SGD)
    if power_sgd and device.type == "cpu" and torch.cuda.is_available():
        # torch's PowerSGD hook synchronizes CUDA on the gradients' device whenever CUDA exists,
        # and fails in the first backward when that device is the CPU
        raise ConfigError(f"DistributedDataParallelKwargs(comm_hook={options.comm_hook!r}) cannot train a CPU "
                          "model on a machine with a CUDA device; hide the GPUs (CUDA_VISIBLE_DEVICES=) or "
                          "train on the GPU")
    wrapper_type = DDPCommunicationHookType(options.comm_wrapper)
    backend = torch.distributed.get_backend()
    if DDPCommunicationHookType.BF16 in (hook_type, wrapper_type) and backend == "gloo":
        # torch's bf16 compression hook runs only on NCCL (or XCCL); gloo fails in the first backward
        raise ConfigError("DistributedDataParallelKwargs(comm_hook/comm_wrapper='bf16') needs the nccl backend; "
                          "with gloo (CPU) use 'fp16' or 'power_sgd'")
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    simple = {
        DDPCommunicationHookType.FP16: default_hooks.fp16_compress_hook,
        DDPCommunicationHookType.BF16: default_hooks.bf16_compress_hook,
    }
    if hook_type in simple:
        model.register_comm_hook(state=None, hook=simple[hook_type])
        return
    hook = (powerSGD_hook.powerSGD_hook if hook_type is DDPCommunicationHookType.POWER_SGD
            else powerSGD_hook.batched_powerSGD_hook)
    state = powerSGD_hook.PowerSGDState(process_group=None, **options.comm_state_option)
    wrapper = DDPCommunicationHookType(options.comm_wrapper)
    if wrapper is DDPCommunicationHookType.FP16:
        hook = default_hooks.fp16_compress_wrapper(hook)
    elif wrapper is DDPCommunicationHookType.BF16:
        hook = default_hooks.bf16_compress_wrapper(hook)
    model.register_comm_hook(state=state, hook=hook)


@contextlib.contextmanager
def sync_next_backward(model: DistributedDataParallel) -> Iterator[None]:
    """Make the next backward all-reduce gradients even inside ``no_sync``."""
    previous = model.require_backward_grad_sync
    model.require_backward_grad_sync = True
    model.require_forward_param_sync = True
    # The reducer must expect this backward; DDP's own forward does the same when syncing.
    model.reducer.prepare_for_backward([])
    try:
        yield
    finally:
        model.require_backward_grad_sync = previous
