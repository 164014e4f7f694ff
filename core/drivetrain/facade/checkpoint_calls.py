"""The ``Accelerator``'s saving and loading: ``save_state``/``load_state`` with the user's
pre-hooks, ``save``/``save_model`` on the processes that write files, and telling plugins and
trackers of each checkpoint.

Each function takes the accelerator (passed in, never imported: this module sits below the
facade); the work itself is :mod:`drivetrain.checkpointing`'s.
"""

from __future__ import annotations

import logging
import os
import pathlib
from typing import Any, Callable

import torch

from ..kernel.errors import CheckpointError

logger = logging.getLogger(__name__)


def saves_files_here(accelerator: Any) -> bool:
    """Whether ``save``/``save_model`` write on this process: ``ProjectConfiguration.save_on_each_node``."""
    if accelerator.project_configuration.save_on_each_node:
        return accelerator.is_local_main_process
    return accelerator.is_main_process


def wait_for_everyone(accelerator: Any) -> None:
    """Barrier; also waits until the last ``save_state`` checkpoint is on disk, raising if it failed."""
    from ..services.checkpointing import commit
    from ..services.checkpointing.run_state import finish_commit

    if commit.pending() is not None:
        finish_commit(accelerator)  # a gather of every process's outcome: a barrier too
    else:
        accelerator.state.wait_for_everyone()
    tell_published_checkpoints(accelerator)


def save(accelerator: Any, obj: Any, f: str | os.PathLike, safe_serialization: bool) -> None:
    """Save ``obj`` on the processes that write files."""
    if not saves_files_here(accelerator):
        return
    if isinstance(f, (str, os.PathLike)) and os.path.isdir(f):
        raise CheckpointError(f"save() writes one file and {os.fspath(f)} is a directory; name a file in it, "
                              "e.g. os.path.join(directory, 'state.pt')")
    if safe_serialization:
        from safetensors.torch import save_file

        save_file(obj, os.fspath(f), metadata={"format": "pt"})
    else:
        torch.save(obj, f)


def wait_for_checkpoint(accelerator: Any) -> None:
    """Wait for the last ``save_state``'s commit on every process; raise if it failed."""
    from ..services.checkpointing.run_state import finish_commit

    finish_commit(accelerator)
    tell_published_checkpoints(accelerator)


def save_state(accelerator: Any, output_dir: str | os.PathLike | None, safe_serialization: bool,
               save_model_func_kwargs: dict[str, Any], blocking: bool = True) -> str:
    """Run the save pre-hooks on the full weights, save the run's state; the checkpoint directory."""
    from ..services.checkpointing.run_state import save_run_state

    weights = None
    if accelerator._prepared.save_state_pre_hooks:
        models = list(accelerator._prepared.models)
        weights = [accelerator.get_state_dict(model, unwrap=True) for model in models]
        for hook in accelerator._prepared.save_state_pre_hooks.values():
            hook(models, weights, output_dir)
    directory = str(save_run_state(accelerator, accelerator._prepared, output_dir, safe_serialization, weights,
                                   save_model_func_kwargs, blocking=blocking))
    tell_published_checkpoints(accelerator)  # the previous save's, or this one's when committed in place
    return directory


def load_state(accelerator: Any, input_dir: str | os.PathLike | None, load_kwargs: dict[str, Any] | None,
               load_model_func_kwargs: dict[str, Any]) -> str:
    """Wait for a pending save, run the load pre-hooks, restore; the checkpoint directory."""
    from ..services.checkpointing.run_state import finish_commit, input_directory, load_run_state

    finish_commit(accelerator)
    tell_published_checkpoints(accelerator)
    if accelerator._prepared.load_state_pre_hooks:
        directory = str(input_directory(accelerator, input_dir))
        for hook in accelerator._prepared.load_state_pre_hooks.values():
            hook(list(accelerator._prepared.models), directory)
    directory = str(load_run_state(accelerator, accelerator._prepared, input_dir, options=load_model_func_kwargs, load_kwargs=load_kwargs))
    tell_checkpoint(accelerator, "load", directory)
    return directory


def register_pre_hook(hooks: dict[int, Callable], hook: Callable[..., None]) -> Any:
    """File ``hook`` in ``hooks``; the handle whose ``remove()`` takes it out again."""
    from torch.utils.hooks import RemovableHandle

    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def save_model(accelerator: Any, model: torch.nn.Module, save_directory: str | os.PathLike,
               max_shard_size: int | str, safe_serialization: bool) -> None:
    """Write the model's full weights (sharded above ``max_shard_size``) where files are written."""
    from ..services.checkpointing.io_pool import FileJobs
    from ..services.checkpointing.model_files import remove_stale_weight_files, write_model_files
    from ..services.checkpointing.target import refuse_non_directory

    refuse_non_directory(pathlib.Path(save_directory).absolute())
    state = accelerator.get_state_dict(model, unwrap=True)
    if saves_files_here(accelerator):
        with FileJobs() as jobs:  # shards side by side
            written = write_model_files(state, save_directory, max_shard_size=max_shard_size,
                                        safe_serialization=safe_serialization, jobs=jobs)
        remove_stale_weight_files(save_directory, written)  # the user's other files stay
    accelerator.state.wait_for_everyone()  # not a checkpoint: no need to wait for a save_state commit


def tell_published_checkpoints(accelerator: Any) -> None:
    """Tell of the checkpoints the commit thread put in place, on the training thread.

    Tracker libraries are not all thread-safe, so the commit thread only queues the notice
    (``Accelerator._on_checkpoint_saved``) and this object's next call tells it.
    """
    while accelerator._published_checkpoints:
        tell_checkpoint(accelerator, "save", accelerator._published_checkpoints.popleft())


def tell_checkpoint(accelerator: Any, event: str, directory: os.PathLike) -> None:
    try:
        accelerator.run.call("drivetrain_on_checkpoint", event=event, directory=os.fspath(directory))
    except Exception as exc:  # a notification never costs a checkpoint
        logger.warning("a plugin failed on checkpoint %s of %s: %s: %s", event, os.fspath(directory),
                       type(exc).__name__, exc)
    if accelerator.trackers:
        accelerator.trackers.on_checkpoint(event, os.fspath(directory))
