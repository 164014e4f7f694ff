"""Save, rotate and resume through s3:// (moto's server on localhost), on 1 or 2 processes.

``remote_checkpoint.py ENDPOINT PROJECT_URL save-and-resume``: trains, saves three
checkpoints with total_limit=2, perturbs the model, resumes the newest and checks every
state bitwise against the one saved (``save-and-resume-then-background``: then saves once
more with the commit, upload included, in the background). ``... stall-upload MARKER``: saves checkpoint_0, then
stalls inside the upload of checkpoint_1 (after its first file) until killed, touching
MARKER once the stall begins.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import torch

from drivetrain import Accelerator, ProjectConfiguration


def setup(endpoint: str, project: str, total_limit: int | None = 2):
    if "RANK" in os.environ:  # launched: each process stages on its own, as on machines without a shared disk
        os.environ["DRIVETRAIN_CHECKPOINT_STAGING_DIR"] += f"/rank-{os.environ['RANK']}"
    config = ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True, total_limit=total_limit,
                                  storage_options={"endpoint_url": endpoint})
    accelerator = Accelerator(project_config=config)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.9)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    return accelerator, model, optimizer, scheduler


def train(accelerator, model, optimizer, scheduler, steps: int) -> None:
    for _ in range(steps):
        inputs = torch.randn(4, 8, device=accelerator.device)
        accelerator.backward(model(inputs).pow(2).mean())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def snapshot(model, optimizer, scheduler) -> list[torch.Tensor]:
    tensors = [p.detach().clone() for p in model.parameters()]
    for state in optimizer.state_dict()["state"].values():
        tensors += [v.clone() for v in state.values() if torch.is_tensor(v)]
    tensors.append(torch.tensor(scheduler.state_dict()["last_epoch"]))
    tensors.append(torch.get_rng_state())
    return tensors


def save_and_resume(endpoint: str, project: str, background_after: bool = False) -> None:
    accelerator, model, optimizer, scheduler = setup(endpoint, project)
    for _ in range(3):
        train(accelerator, model, optimizer, scheduler, 2)
        accelerator.save_state()
    saved = snapshot(model, optimizer, scheduler)
    train(accelerator, model, optimizer, scheduler, 3)  # moves every state away from the saved one
    loaded = accelerator.load_state()
    assert loaded.endswith("checkpoint_2"), loaded
    now = snapshot(model, optimizer, scheduler)
    assert len(now) == len(saved) and all(torch.equal(a, b) for a, b in zip(saved, now)), "resumed state differs"
    assert accelerator.save_iteration == 3
    accelerator.wait_for_everyone()
    print(f"rank {accelerator.process_index}: resumed checkpoint_2 bitwise", flush=True)
    if background_after:
        train(accelerator, model, optimizer, scheduler, 1)
        at_save = snapshot(model, optimizer, scheduler)
        # checkpoint_3: copied to host memory, then written and uploaded while the next steps run
        accelerator.save_state(blocking=False)
        train(accelerator, model, optimizer, scheduler, 1)
        accelerator.wait_for_checkpoint()  # waits for the upload and rotation on every process
        assert accelerator.load_state().endswith("checkpoint_3")
        assert all(torch.equal(a, b) for a, b in zip(at_save, snapshot(model, optimizer, scheduler)))
        print(f"rank {accelerator.process_index}: checkpoint_3 uploaded in the background", flush=True)
        failed_upload_keeps_the_previous(accelerator, model, optimizer, scheduler)


def failed_upload_keeps_the_previous(accelerator, model, optimizer, scheduler) -> None:
    """Rank 1's upload fails: the save fails on both ranks, checkpoint_3 stays the newest,
    and the next save replaces what rank 0 uploaded of checkpoint_4."""
    from drivetrain.checkpointing import remote
    from drivetrain.errors import CheckpointError

    os.environ["DRIVETRAIN_CHECKPOINT_BACKGROUND"] = "0"
    put = remote._put
    if accelerator.process_index == 1:
        def refused(store, local, names):
            raise OSError("the store refused the upload")

        remote._put = refused
    train(accelerator, model, optimizer, scheduler, 1)
    try:
        accelerator.save_state()
    except CheckpointError as error:
        assert "the store refused the upload" in str(error), error
    else:
        raise AssertionError("a save whose upload failed on rank 1 succeeded")
    remote._put = put
    assert accelerator.load_state().endswith("checkpoint_3")
    assert accelerator.save_iteration == 4
    accelerator.save_state()  # checkpoint_4, complete this time
    print(f"rank {accelerator.process_index}: a failed upload left checkpoint_3 the newest", flush=True)


def stall_upload(endpoint: str, project: str, marker: str) -> None:
    import s3fs

    accelerator, model, optimizer, scheduler = setup(endpoint, project, total_limit=None)
    train(accelerator, model, optimizer, scheduler, 2)
    accelerator.save_state()
    original = s3fs.S3FileSystem._put_file

    async def stalled(self, lpath, rpath, *args, **kwargs):
        await original(self, lpath, rpath, *args, **kwargs)
        Path(marker).touch()
        await asyncio.sleep(600)  # killed here: some files are up, the manifest never is

    s3fs.S3FileSystem._put_file = stalled
    train(accelerator, model, optimizer, scheduler, 2)
    accelerator.save_state()
    time.sleep(600)


if __name__ == "__main__":
    endpoint, project, action = sys.argv[1:4]
    if action.startswith("save-and-resume"):
        save_and_resume(endpoint, project, background_after=action.endswith("then-background"))
    else:
        stall_upload(endpoint, project, sys.argv[4])
