"""A few training steps on the run's device, for the real tests of a platform plugin."""

from __future__ import annotations

import torch


def seeded_draws_repeat(accelerator) -> bool:
    """Whether ``set_seed`` makes the device generator draw the same numbers again."""
    from drivetrain.utils import set_seed

    set_seed(3)
    first = torch.rand(4, device=accelerator.device)
    set_seed(3)
    return torch.equal(torch.rand(4, device=accelerator.device), first)


def train_linear(accelerator, steps: int = 20) -> list[float]:
    """Fit a linear layer to a sum of its inputs under the accelerator's precision; the losses."""
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    x = torch.randn(32, 4, device=accelerator.device)
    losses = []
    for _ in range(steps):
        with accelerator.autocast():
            loss = (model(x).float() - x.sum(1, keepdim=True)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses
