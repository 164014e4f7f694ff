"""An ``Accelerator``'s saving and loading: ``save_state``/``load_state`` with the user's
pre-hooks, ``save``/``save_model`` on the processes that write files, the full state dict of a
prepared model, and telling plugins and trackers of each checkpoint.

Each function takes the accelerator's :class:`~drivetrain.runtime.session.Session`, never the
``Accelerator``: the facade's methods are one call here, and the services that save on their
own (checkpoint on preemption, the step monitor's spike guard) call the same functions.
"""

from __future__ import annotations

import logging
import os
import pathlib
from typing import TYPE_CHECKING, Any, Callable

import torch

from ...kernel.errors import CheckpointError

if TYPE_CHECKING:  # pragma: no cover
    from ...runtime.session import Session

logger = logging.getLogger("drivetrain.facade.checkpoint_calls")  # its name before it moved, kept for log filters


def saves_files_here(session: Session) -> bool:
    """Whether ``save``/``save_model`` write on this process: ``ProjectConfiguration.save_on_each_node``."""
    if session.project_configuration.save_on_each_node:
        return session.is_local_main_process
    return session.is_main_process


def wait_for_everyone(session: Session) -> None:
    """Barrier; also waits until the last ``save_state`` checkpoint is on disk, raising if it failed."""
    from . import commit
    from .run_state import finish_commit

    if commit.pending() is not None:
        finish_commit(session)  # a gather of every process's outcome: a barrier too
    else:
        session.state.wait_for_everyone()
    tell_published_checkpoints(session)


def save(session: Session, obj: Any, f: str | os.PathLike, safe_serialization: bool) -> None:
    """Save ``obj`` on the processes that write files."""
    if not saves_files_here(session):
        return
    if isinstance(f, (str, os.PathLike)) and os.path.isdir(f):
        raise CheckpointError(f"save() writes one file and {os.fspath(f)} is a directory; name a file in it, "
                              "e.g. os.path.join(directory, 'state.pt')")
    if safe_serialization:
        from safetensors.torch import save_file

        save_file(obj, os.fspath(f), metadata={"format": "pt"})
    else:
        torch.save(obj, f)


def wait_for_checkpoint(session: Session) -> None:
    """Wait for the last ``save_state``'s commit on every process; raise if it failed."""
    from .run_state import finish_commit

    finish_commit(session)
    tell_published_checkpoints(session)


def save_state(session: Session, output_dir: str | os.PathLike | None, safe_serialization: bool,
               save_model_func_kwargs: dict[str, Any], blocking: bool = True) -> str:
    """Run the save pre-hooks on the full weights, save the run's state; the checkpoint directory."""
    from .full_state import full_state_dict
    from .run_state import save_run_state

    weights = None
    if session.prepared.save_state_pre_hooks:
        models = list(session.prepared.models)
        weights = [full_state_dict(session, model, unwrap=True) for model in models]
        for hook in session.prepared.save_state_pre_hooks.values():
            hook(models, weights, output_dir)
    directory = str(save_run_state(session, output_dir, safe_serialization, weights,
                                   save_model_func_kwargs, blocking=blocking))
    tell_published_checkpoints(session)  # the previous save's, or this one's when committed in place
    if session.preemption is not None and output_dir is None:
        session.preemption.saved = True  # a preemption right after this step keeps this checkpoint
    return directory


def load_state(session: Session, input_dir: str | os.PathLike | None, load_kwargs: dict[str, Any] | None,
               load_model_func_kwargs: dict[str, Any]) -> str:
    """Wait for a pending save, run the load pre-hooks, restore; the checkpoint directory."""
    from .run_state import finish_commit, input_directory, load_run_state

    finish_commit(session)
    tell_published_checkpoints(session)
    if session.prepared.load_state_pre_hooks:
        directory = str(input_directory(session, input_dir))
        for hook in session.prepared.load_state_pre_hooks.values():
            hook(list(session.prepared.models), directory)
    directory = str(load_run_state(session, input_dir, options=load_model_func_kwargs, load_kwargs=load_kwargs))
    tell_checkpoint(session, "load", directory)
    return directory


def register_pre_hook(hooks: dict[int, Callable], hook: Callable[..., None]) -> Any:
    """File ``hook`` in ``hooks``; the handle whose ``remove()`` takes it out again."""
    from torch.utils.hooks import RemovableHandle

    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def save_model(session: Session, model: torch.nn.Module, save_directory: str | os.PathLike,
               max_shard_size: int | str, safe_serialization: bool) -> None:
    """Write the model's full weights (sharded above ``max_shard_size``) where files are written."""
    from .full_state import full_state_dict
    from .io_pool import FileJobs
    from .model_files import remove_stale_weight_files, write_model_files
    from .target import refuse_non_directory

    refuse_non_directory(pathlib.Path(save_directory).absolute())
    state = full_state_dict(session, model, unwrap=True)
    if saves_files_here(session):
        with FileJobs() as jobs:  # shards side by side
            written = write_model_files(state, save_directory, max_shard_size=max_shard_size,
                                        safe_serialization=safe_serialization, jobs=jobs)
        remove_stale_weight_files(save_directory, written)  # the user's other files stay
    session.state.wait_for_everyone()  # not a checkpoint: no need to wait for a save_state commit


def tell_published_checkpoints(session: Session) -> None:
    """Tell of the checkpoints the commit thread put in place, on the training thread.

    Tracker libraries are not all thread-safe, so the commit thread only queues the notice
    (``Session.on_checkpoint_saved``) and the facade's next call tells it.
    """
    while session.published_checkpoints:
        tell_checkpoint(session, "save", session.published_checkpoints.popleft())


def tell_checkpoint(session: Session, event: str, directory: os.PathLike) -> None:
    try:
        session.run.call("drivetrain_on_checkpoint", event=event, directory=os.fspath(directory))
    except Exception as exc:  # a notification never costs a checkpoint
        logger.warning("a plugin failed on checkpoint %s of %s: %s: %s", event, os.fspath(directory),
                       type(exc).__name__, exc)
    if session.trackers:
        session.trackers.on_checkpoint(event, os.fspath(directory))


def log(session: Session, values: dict[str, Any], step: int | None = None, log_kwargs: dict | None = None) -> None:
    """Tell of checkpoints put in place since the last call, then log ``values`` to every tracker."""
    tell_published_checkpoints(session)
    if session.trackers:
        session.trackers.log(values, step=step, log_kwargs=log_kwargs or {})
