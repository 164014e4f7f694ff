"""Launched on 2 processes by ``drivetrain launch --config-file`` with ``distributed_type:
DEEPSPEED``, a ``deepspeed_config:`` block naming a DeepSpeed JSON file full of ``"auto"``
values and a hostfile (so DeepSpeed's own launcher starts the processes), plus
``--zero-stage 2 --offload-optimizer-device cpu --gradient-clipping 0.5
--gradient-accumulation-steps 2`` on the command line.

    check_deepspeed_config.py

Checks that the processes were started by DeepSpeed's launcher, that ``Accelerator()`` with no
argument built its ``DeepSpeedPlugin`` from what the launcher passed, that ``prepare`` with
``DummyOptim`` / ``DummyScheduler`` filled every ``"auto"`` value, and that the engine trains
with DeepSpeed's CPU Adam on offloaded optimizer states. Prints CHECK-DEEPSPEED-CONFIG-OK.
"""

from __future__ import annotations

import torch

from drivetrain import Accelerator, DistributedType, DummyOptim, DummyScheduler

torch.set_num_threads(1)


def main() -> None:
    accelerator = Accelerator()
    state = accelerator.state
    assert state.distributed_type == DistributedType.DEEPSPEED, state.distributed_type
    assert state.cluster.name == "deepspeed-launcher", state.cluster
    assert state.num_processes == 2 and state.cluster.local_world_size == 2
    plugin = state.deepspeed_plugin
    assert plugin.zero_stage == 2 and plugin.offload_optimizer_device == "cpu", plugin
    assert plugin.gradient_clipping == 0.5, plugin
    assert accelerator.gradient_accumulation_steps == 2

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = DummyOptim(model.parameters(), lr=0.01, weight_decay=0.1, betas=[0.9, 0.99])
    scheduler = DummyScheduler(optimizer, total_num_steps=20, warmup_num_steps=2)
    data = torch.utils.data.TensorDataset(torch.randn(64, 6), torch.randn(64, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)

    config = plugin.deepspeed_config
    assert config["train_micro_batch_size_per_gpu"] == 4, config
    assert config["train_batch_size"] == 4 * 2 * 2, config
    assert config["gradient_accumulation_steps"] == 2 and config["gradient_clipping"] == 0.5, config
    assert config["optimizer"]["params"] == {"lr": 0.01, "weight_decay": 0.1, "betas": [0.9, 0.99]}, config
    assert config["scheduler"]["params"] == {"warmup_min_lr": 0, "warmup_max_lr": 0.01, "warmup_num_steps": 2,
                                             "total_num_steps": 10}, config  # 20 steps counted for 1 process
    assert config["zero_optimization"]["offload_optimizer"]["device"] == "cpu", config
    assert config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is False, config
    assert config["fp16"]["enabled"] is False and config["bf16"]["enabled"] is False, config
    assert type(model.basic_optimizer).__name__ == "DeepSpeedCPUAdam", type(model.basic_optimizer)
    assert type(scheduler.scheduler).__name__ == "WarmupDecayLR", type(scheduler.scheduler)

    x, y = next(iter(loader))
    losses, rates = [], []
    for _step in range(10):
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        losses.append(loss.item())
        rates.append(scheduler.get_last_lr()[0])
    assert model.global_steps == 5, model.global_steps
    assert losses[-1] < losses[0], losses
    assert all(rates[i] == rates[i - 1] for i in range(2, len(rates), 2)), rates  # no step inside a window
    assert rates[-1] > rates[0] == 0, rates  # warming up from warmup_min_lr, once per optimizer step
    accelerator.wait_for_everyone()
    print(f"CHECK-DEEPSPEED-CONFIG-OK rank {accelerator.process_index}", flush=True)


if __name__ == "__main__":
    main()
