"""Run by `drivetrain launch --tpu` (tests/test_xla_runtime.py): its `train` function runs in the
xmp.spawn replica, trains a few steps on the XLA device and writes what it saw to argv[1]."""

import json
import os
import sys

import torch

from drivetrain import Accelerator


def train():
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(32, 3)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data, data.sum(1, keepdim=True)), batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for _epoch in range(3):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    with open(sys.argv[1], "w") as handle:
        json.dump({"distributed_type": accelerator.distributed_type.value, "device": str(accelerator.device),
                   "num_processes": accelerator.num_processes, "losses": losses,
                   "downcast": os.environ.get("XLA_DOWNCAST_BF16"), "use_bf16": os.environ.get("XLA_USE_BF16"),
                   "mixed_precision": accelerator.mixed_precision, "pjrt_processes":
                   os.environ.get("PJRT_LOCAL_PROCESS_COUNT")}, handle)


def main():
    raise SystemExit("the launcher must call train (--main-training-function train), not main")


if __name__ == "__main__":
    main()
