"""The ``ddp`` strategy: every process holds the whole model; gradients are averaged in
backward by ``torch.nn.parallel.DistributedDataParallel``. Chosen automatically when a run has
several processes and no other strategy was asked for. Its run hooks live on the strategy's
role object (``strategy.py``)."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, StrategySpec, hookimpl

# API 1.6: the run hooks on one role object per run.
PLUGIN_INFO = PluginInfo(api_version="2.0", description="DistributedDataParallel (automatic with several processes)")


@hookimpl
def drivetrain_register_strategies():
    return [StrategySpec(name="ddp", distributed_type=None, automatic=True, needs_multiple_processes=True,
                         hooks="drivetrain_ddp.strategy:DDPStrategy",
                         description="replicate the model, all-reduce gradients")]


@hookimpl
def drivetrain_public_names():
    return {"DistributedDataParallelKwargs": "drivetrain_ddp.options:DistributedDataParallelKwargs",
            "DDPCommunicationHookType": "drivetrain_ddp.options:DDPCommunicationHookType"}
