"""Train a small classifier on synthetic data with drivetrain.

Runs unchanged on one CPU process or many:

    drivetrain launch --cpu --num-processes 2 examples/train_classifier.py
    python examples/train_classifier.py --mixed-precision bf16

The data are points of several interleaved spirals; the model is a small MLP. The main
process shows a progress bar; evaluation gathers predictions from every process with
``gather_for_metrics`` (which drops the samples padding duplicated), and the last line
prints the accuracy on the whole evaluation set.
"""

from __future__ import annotations

import argparse
import math

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from drivetrain import Accelerator
from drivetrain.utils import set_seed

try:
    from tqdm.auto import tqdm
except ImportError:  # the progress bar is optional
    tqdm = None


def spirals(num_samples: int, num_classes: int, seed: int) -> TensorDataset:
    """Points on ``num_classes`` interleaved noisy spiral arms, labelled by arm."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, num_classes, (num_samples,), generator=generator)
    radius = torch.rand(num_samples, generator=generator)
    angle = labels * (2 * math.pi / num_classes) + radius * 3.0 + 0.15 * torch.randn(num_samples, generator=generator)
    points = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    return TensorDataset(points, labels)


def build_model(num_classes: int, hidden: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(2, hidden), nn.GELU(),
        nn.Linear(hidden, hidden), nn.GELU(),
        nn.Linear(hidden, num_classes),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64, help="per process")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--num-classes", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--train-samples", type=int, default=6000)
    parser.add_argument("--eval-samples", type=int, default=1001)  # not a multiple of the processes on purpose
    parser.add_argument("--mixed-precision", default=None)
    parser.add_argument("--gradient-accumulation-steps", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    accelerator = Accelerator(mixed_precision=args.mixed_precision,
                              gradient_accumulation_steps=args.gradient_accumulation_steps)
    set_seed(args.seed)

    train_loader = DataLoader(spirals(args.train_samples, args.num_classes, seed=1), batch_size=args.batch_size,
                              shuffle=True)
    eval_loader = DataLoader(spirals(args.eval_samples, args.num_classes, seed=2), batch_size=2 * args.batch_size)
    model = build_model(args.num_classes, args.hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    total_steps = args.epochs * math.ceil(len(train_loader) / accelerator.num_processes)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=total_steps * accelerator.num_processes)

    model, optimizer, train_loader, eval_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, eval_loader, scheduler
    )
    accelerator.print(f"training on {accelerator.num_processes} process(es), {accelerator.device}, "
                      f"{accelerator.distributed_type}, mixed precision: {accelerator.mixed_precision}")

    steps = len(train_loader) * args.epochs
    progress = tqdm(total=steps, disable=not accelerator.is_local_main_process, desc="train") if tqdm else None
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        model.train()
        for points, labels in train_loader:
            with accelerator.accumulate(model):
                loss = loss_fn(model(points), labels)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if progress is not None:
                progress.update(1)
                progress.set_postfix(epoch=epoch, loss=f"{loss.item():.3f}")
    if progress is not None:
        progress.close()

    model.eval()
    correct = seen = 0
    for points, labels in eval_loader:
        with torch.no_grad():
            predictions = model(points).argmax(dim=-1)
        predictions, labels = accelerator.gather_for_metrics((predictions, labels))
        correct += (predictions == labels).sum().item()
        seen += labels.numel()
    accelerator.print(f"evaluated {seen} samples")
    accelerator.print(f"accuracy: {correct / seen:.4f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
