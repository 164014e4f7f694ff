"""Launched on 2 processes: MonitorKwargs logs to TensorBoard, and a loss spike that only
process 1 sees at step 12 is skipped by both (checked here: the parameters do not change at
that step, and are the same on both processes at the end). Prints the script's own count of
samples and tokens and the wall time they took, from the end of the first step (where the
monitor's windows start) to the end of the last, for the test to compare with what was
logged. Usage: check_monitoring.py LOGGING_DIR
"""

from __future__ import annotations

import json
import logging
import sys
import time

import torch

from drivetrain import Accelerator, MonitorKwargs

torch.set_num_threads(1)
logging.basicConfig(level=logging.WARNING, format="%(message)s")
logging.getLogger("drivetrain.monitoring").setLevel(logging.INFO)
STEPS, BATCH, LENGTH, SPIKE_STEP = 41, 8, 24, 12  # BATCH per process

accelerator = Accelerator(log_with="tensorboard", project_dir=sys.argv[1],
                          kwargs_handlers=[MonitorKwargs(log_every=10, on_spike="skip", spike_factor=10,
                                                         spike_window=8)])
accelerator.init_trackers("monitoring")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(64, 32), torch.nn.Flatten(), torch.nn.Linear(32 * LENGTH, 256),
                            torch.nn.Tanh(), torch.nn.Linear(256, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
generator = torch.Generator().manual_seed(1)
count = STEPS * BATCH * accelerator.num_processes
ids = torch.randint(0, 64, (count, LENGTH), generator=generator)
lengths = torch.randint(1, LENGTH + 1, (count, 1), generator=generator)
rows = [{"input_ids": ids[i], "attention_mask": (torch.arange(LENGTH) < lengths[i]).long(),
         "labels": ids[i, :4].float().mean(dim=0, keepdim=True) / 64} for i in range(count)]
data = torch.utils.data.DataLoader(rows, batch_size=BATCH)
model, optimizer, data = accelerator.prepare(model, optimizer, data)

samples = tokens = 0
started = None
for step, batch in enumerate(data, start=1):
    if step > 1:  # the monitor's windows leave out the first step, which counts the FLOPs
        samples += batch["input_ids"].shape[0]
        tokens += int(batch["attention_mask"].sum())
    loss = torch.nn.functional.mse_loss(model(batch["input_ids"]), batch["labels"])
    if step == SPIKE_STEP and accelerator.process_index == 1:
        loss = loss * 1e4
    before = [p.detach().clone() for p in model.parameters()]
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    changed = any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    assert changed == (step != SPIKE_STEP), f"step {step}: parameters changed={changed}"
    assert accelerator.optimizer_step_was_skipped == (step == SPIKE_STEP)
    if step == 1:
        started = time.perf_counter()
wall = time.perf_counter() - started
assert step == STEPS, step

flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
everywhere = accelerator.gather(flat.unsqueeze(0))
assert torch.equal(everywhere[0], everywhere[1]), "the processes' parameters differ"
# every process's own count; the logged rates are for all processes
totals = accelerator.reduce(torch.tensor([samples, tokens], dtype=torch.float64), "sum")
accelerator.end_training()
if accelerator.is_main_process:
    print(json.dumps({"samples": int(totals[0]), "tokens": int(totals[1]), "wall": wall}))
