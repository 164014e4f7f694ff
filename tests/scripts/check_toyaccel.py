"""Launched with ``drivetrain launch --platform toyaccel`` and TOYACCEL_DEVICES=2 (one process
per device): DDP training on the third-party template's platform, over its own collectives
backend. Prints CHECK-TOYACCEL-OK <rank> at the end."""

from __future__ import annotations

import torch
import torch.distributed as dist

from drivetrain import Accelerator
from drivetrain.utils import set_seed, synchronize_rng_state
from drivetrain_toyaccel import runtime

torch.set_num_threads(1)


def main() -> None:
    accelerator = Accelerator(mixed_precision="bf16")
    rank, world = accelerator.process_index, accelerator.num_processes
    run = accelerator.state.run
    assert world == 2, world
    assert (run.selection.platform_plugin, run.selection.reasons["platform"]) == ("toyaccel", "requested")
    assert accelerator.distributed_type == "MULTI_TOYACCEL", accelerator.distributed_type
    assert dist.get_backend() == "toyccl", dist.get_backend()

    # each process seeds its device generator differently; synchronising gives rank 0's to all
    set_seed(10, device_specific=True)
    draws = accelerator.gather(runtime.randn(4).unsqueeze(0))
    assert not torch.equal(draws[0], draws[1])
    synchronize_rng_state("toyaccel")
    draws = accelerator.gather(runtime.randn(4).unsqueeze(0))
    assert torch.equal(draws[0], draws[1])

    set_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # a different start on each rank: DDP's broadcast at wrap time must make them equal
    with torch.no_grad():
        model[0].bias.add_(rank)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert type(model).__name__ == "DistributedDataParallel"
    assert dist.get_backend(model.process_group) == "toyccl"  # DDP reduces gradients over it

    data = torch.Generator().manual_seed(1234 + rank)  # each rank its own share of the data
    x = torch.randn(64, 6, generator=data).to(accelerator.device)
    y = x @ torch.linspace(-1, 1, 6).unsqueeze(1).to(x.device) * 0.5  # a target the model can learn in 30 steps
    losses = []
    for _step in range(30):
        with accelerator.autocast():
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
    assert losses[-1] < 0.2 * losses[0], losses

    flat = torch.cat([p.detach().reshape(-1) for p in accelerator.unwrap_model(model).parameters()])
    both = accelerator.gather(flat.unsqueeze(0))
    assert torch.equal(both[0], both[1]), "parameters differ between ranks: gradients were not synchronised"
    accelerator.wait_for_everyone()
    print(f"CHECK-TOYACCEL-OK {rank} loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
