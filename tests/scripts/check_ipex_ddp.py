"""Launched with ``--ipex --mixed-precision bf16`` on CPU processes: IPEX optimises each rank's
model and optimizer, DDP wraps the result, ranks stay equal, the loss falls, and a checkpoint
round-trips. Prints ``IPEX-DDP OK <first loss> <last loss>`` on rank 0."""

import sys

import torch

from drivetrain import Accelerator
from drivetrain.utils import set_seed

accelerator = Accelerator()
state = accelerator.state
assert state.use_ipex is True, "IPEX was not switched on in the child"
assert accelerator.mixed_precision == "bf16" and state.num_processes == 2
set_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
inputs = torch.randn(512, 16, generator=torch.Generator().manual_seed(1))
targets = inputs[:, :4].sum(1, keepdim=True) - inputs[:, 4:8].sum(1, keepdim=True)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(inputs, targets), batch_size=32, shuffle=True)
model, optimizer, data = accelerator.prepare(model, optimizer, data)
assert type(model).__name__ == "DistributedDataParallel", type(model)
assert {p.dtype for p in model.parameters()} == {torch.bfloat16}  # IPEX's bf16 weights, under DDP
losses = []
for _epoch in range(8):
    for x, y in data:
        with accelerator.autocast():
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    losses.append(accelerator.reduce(loss.detach(), "mean").item())
weights = accelerator.unwrap_model(model).state_dict()
gathered = accelerator.gather(torch.cat([w.float().reshape(-1) for w in weights.values()])[None])
assert torch.equal(gathered[0], gathered[1]), "ranks diverged"
assert losses[-1] < losses[0] / 4, losses
directory = accelerator.save_state(sys.argv[1])
accelerator.wait_for_everyone()
saved = {k: v.clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
with torch.no_grad():
    for p in model.parameters():
        p.add_(1.0)
accelerator.load_state(directory)
restored = accelerator.unwrap_model(model).state_dict()
assert all(torch.allclose(restored[k].float(), saved[k].float()) for k in saved), "load_state did not restore"
if accelerator.is_main_process:
    print(f"IPEX-DDP OK {losses[0]:.4f} {losses[-1]:.4f}", flush=True)
accelerator.end_training()
