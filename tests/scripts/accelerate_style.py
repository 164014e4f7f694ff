"""A training script written for Accelerate, with `accelerate` replaced by `drivetrain` in its
imports and nothing else changed. It leans on the `utils` helpers such scripts use.

Usage: drivetrain launch --num-processes 2 accelerate_style.py OUTPUT_DIR
"""

import json
import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from drivetrain import Accelerator
from drivetrain.logging import get_logger
from drivetrain.tracking import GeneralTracker, on_main_process
from drivetrain.utils import (
    LoggerType,
    ProjectConfiguration,
    compare_versions,
    find_executable_batch_size,
    gather_object,
    is_tensorboard_available,
    is_torch_version,
    parse_flag_from_env,
    patch_environment,
    set_seed,
    tqdm,
)

logger = get_logger(__name__)


class JSONTracker(GeneralTracker):
    """A custom tracker, as Accelerate's docs show how to write one."""

    name = "json"
    requires_logging_directory = False

    def __init__(self, path):
        super().__init__()
        self.path = path
        self.rows = []

    @property
    def tracker(self):
        return self.rows

    @on_main_process
    def store_init_configuration(self, values):
        self.rows.append({"config": values})

    @on_main_process
    def log(self, values, step=None, **kwargs):
        self.rows.append({"step": step, **values})

    @on_main_process
    def finish(self):
        with open(self.path, "w") as handle:
            json.dump(self.rows, handle)


def main():
    output_dir = sys.argv[1]
    assert is_torch_version(">=", "2.0") and compare_versions("torch", ">=", "2.0")
    with patch_environment(my_script_flag="yes"):
        assert parse_flag_from_env("MY_SCRIPT_FLAG")
    assert "MY_SCRIPT_FLAG" not in os.environ

    trackers = [JSONTracker(os.path.join(output_dir, "metrics.json"))]
    if is_tensorboard_available():
        trackers.append(LoggerType.TENSORBOARD)
    accelerator = Accelerator(log_with=trackers,
                              project_config=ProjectConfiguration(project_dir=output_dir, logging_dir=output_dir))
    accelerator.init_trackers("accelerate_style", config={"lr": 0.1})
    set_seed(42)

    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    tried = []

    @find_executable_batch_size(starting_batch_size=32)
    def train(batch_size):
        tried.append(batch_size)
        if batch_size > 8:  # as if the device ran out of memory at the larger sizes
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(data, batch_size=batch_size, shuffle=True)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        losses = []
        for step, (x, y) in enumerate(tqdm(loader, desc="training")):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            accelerator.log({"loss": loss.item()}, step=step)
        return losses

    losses = train()
    seen = gather_object([{"rank": accelerator.process_index, "steps": len(losses), "tried": tried}])
    accelerator.end_training()
    if accelerator.is_main_process:
        with open(os.path.join(output_dir, "result.json"), "w") as handle:
            json.dump({"ranks": seen, "num_processes": accelerator.num_processes}, handle)
    logger.info("done", main_process_only=True)


if __name__ == "__main__":
    main()
