"""The ``ddp`` strategy: every process holds the whole model; gradients are averaged in
backward by ``torch.nn.parallel.DistributedDataParallel``. Chosen automatically when a run has
several processes and no other strategy was asked for."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, StrategySpec, hookimpl

PLUGIN_INFO = PluginInfo(api_version="1.0", description="DistributedDataParallel (automatic with several processes)")


@hookimpl
def drivetrain_register_strategies():
    return [StrategySpec(name="ddp", distributed_type=None, automatic=True, needs_multiple_processes=True,
                         description="replicate the model, all-reduce gradients")]


@hookimpl
def drivetrain_public_names():
    return {"DistributedDataParallelKwargs": "drivetrain_ddp.options:DistributedDataParallelKwargs",
            "DDPCommunicationHookType": "drivetrain_ddp.options:DDPCommunicationHookType"}


@hookimpl
def drivetrain_wrap_model(model, run, evaluation_mode):
    if run.state.num_processes <= 1 or evaluation_mode:
        return None
    from .wrap import wrap_ddp

    return wrap_ddp(model, run)


@hookimpl
def drivetrain_no_sync(model, run):
    no_sync = getattr(model, "no_sync", None)
    return no_sync() if no_sync is not None else None


@hookimpl
def drivetrain_unwrap_model(model, run, keep_fp32_wrapper):
    from torch.nn.parallel import DistributedDataParallel

    return model.module if isinstance(model, DistributedDataParallel) else None


@hookimpl
def drivetrain_sync_in_backward(model, run):
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(model, DistributedDataParallel):
        return None
    from .wrap import sync_next_backward

    return sync_next_backward(model)
