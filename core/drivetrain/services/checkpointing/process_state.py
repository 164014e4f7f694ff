"""What one process saves: the strategy's files, and the states the core writes.

:func:`collect` lets the strategy plugin write its models and optimizers (or hand the
writing to a :class:`~.deferred.DeferredWrites` in a non-blocking save) and gathers the
states the core writes; :func:`write` writes and hashes them. ``run_state`` runs both in
``save_state``, or the second on the commit's thread for ``save_state(blocking=False)``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..other import unwrap_prepared_model
from . import checksums
from .deferred import DeferredWrites
from .full_state import full_state_dict
from .io_pool import FileJobs, shard_bytes, tensor_bytes
from .model_files import write_model_files
from .safetensors_io import write_safetensors
from .tree_io import save_tree

if TYPE_CHECKING:  # pragma: no cover
    from ...runtime.session import Session


# ------------------------------------------------------------------- RNG


def rng_state(platform: Any) -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "device": platform.get_rng_state()}


def set_rng_state(state: dict[str, Any], platform: Any) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("device") is not None:
        platform.set_rng_state(state["device"])


def _gradients(session: Session, skip: set[int]) -> dict[str, torch.Tensor]:
    """Gradients accumulated in an unfinished window, by model index and name.

    Models in ``skip`` were written by their strategy, which lays their parameters out its
    own way (shards): their ``.grad`` cannot be restored by name, so they are left out and
    loading warns that the window's gradients are lost.
    """
    grads = {}
    for index, model in enumerate(session.prepared.models):
        if index in skip:
            continue
        for name, parameter in unwrap_prepared_model(session.run, model).named_parameters():
            if parameter.grad is not None:
                grads[f"{index}.{name}"] = parameter.grad
    return grads


@dataclass
class ProcessState:
    """What this process saves: files its strategy wrote, and the states the core writes."""

    written: list[str] = field(default_factory=list)  # written by the strategy, relative names
    model_states: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    trees: list[tuple[str, Any]] = field(default_factory=list)
    grads: dict[str, torch.Tensor] = field(default_factory=dict)
    deferred: "DeferredWrites | None" = None  # strategy writes that run with the core's (non-blocking saves)


def collect(session: Session, directory: Path,
                                safe_serialization: bool, weights: list[Any] | None, options: dict[str, Any],
                                deferred: DeferredWrites | None = None) -> ProcessState:
    """Let the strategy write its models and optimizers; gather the states the core writes.

    With ``deferred`` (a non-blocking save), a strategy may hand part of its writing to it
    instead of writing now; the core runs it with its own writing."""
    run, main = session.run, session.is_main_process
    collected = ProcessState(deferred=deferred)
    strategy_written: set[int] = set()
    for index, model in enumerate(session.prepared.models):
        if weights is not None and index >= len(weights):
            continue  # a pre-hook took this model's weights out: it saves them itself
        files = run.call("drivetrain_save_model_state", model=model, index=index, directory=str(directory),
                         safe_serialization=safe_serialization, options=dict(options), deferred=deferred)
        if files is None:
            state = weights[index] if weights is not None else full_state_dict(session, model, unwrap=True)
            if main:
                collected.model_states.append((index, state))
        else:
            collected.written += list(files)
            strategy_written.add(index)
    for index, optimizer in enumerate(session.prepared.optimizers):
        files = run.call("drivetrain_save_optimizer_state", optimizer=optimizer, index=index, directory=str(directory),
                         deferred=deferred)
        if files is None:
            if main:
                collected.trees.append((f"optimizer_{index}", optimizer.state_dict()))
        else:
            collected.written += list(files)
    if main:
        for name, objects in (("scheduler", session.prepared.schedulers), ("dataloader", session.prepared.dataloaders),
                              ("custom_checkpoint", session.prepared.custom_objects)):
            collected.trees += [(f"{name}_{index}", obj.state_dict()) for index, obj in enumerate(objects)
                                if hasattr(obj, "state_dict")]
        if session.scaler is not None:
            collected.trees.append(("scaler", session.scaler.state_dict()))
        collected.trees.append(("accelerator", {"step": session.step, "sync_gradients": session.sync_gradients,
                                                "iteration": session.project_configuration.iteration}))
    collected.trees.append((f"random_states_{session.process_index}", rng_state(run.platform)))
    if not session.sync_gradients:
        collected.grads = _gradients(session, skip=strategy_written)
    return collected


def write(collected: ProcessState, directory: Path, rank: int,
                         safe_serialization: bool) -> dict[str, str]:
    """Write what :func:`collect` gathered; returns each file's name and checksum.

    The core writes on a few threads, split into files small enough to keep every thread
    busy, hashing each file as it writes it (the files the strategy wrote are hashed
    afterwards, on the same threads). Nothing is synced here: the commit does that (see
    ``commit.py``)."""
    written = list(collected.written)
    if collected.deferred is not None:
        written += collected.deferred.run()
    recorder = checksums.Recorder()
    with FileJobs() as jobs:
        plugin_files = {name: jobs.submit(checksums.file_digest, directory / name) for name in written}
        total = sum(tensor_bytes(state) for _i, state in collected.model_states) + sum(
            tensor_bytes(t) for _n, t in collected.trees)
        limit = shard_bytes(total, jobs.threads)
        for index, state in collected.model_states:
            written += _write_model(state, directory, index, safe_serialization, jobs, limit, recorder)
        for name, tree in collected.trees:
            written += save_tree(tree, directory / name, jobs=jobs, shard_bytes=limit, recorder=recorder)
        if collected.grads:
            jobs.submit(write_safetensors, directory / f"gradients_{rank}.safetensors", collected.grads, fsync=False,
                        recorder=recorder)
            written.append(f"gradients_{rank}.safetensors")
    digests = {}
    for name in written:
        digest = plugin_files[name].result() if name in plugin_files else recorder.get(directory / name)
        digests[name] = digest if digest is not None else checksums.file_digest(directory / name)
    return digests


def _write_model(state: dict[str, Any], directory: Path, index: int, safe_serialization: bool, jobs: FileJobs,
                 limit: int, recorder: checksums.Recorder) -> list[str]:
    subdir = f"model_{index}"
    files = write_model_files(state, directory / subdir, max_shard_size=limit, safe_serialization=safe_serialization,
                              fsync=False, jobs=jobs, recorder=recorder)
    return [f"{subdir}/{name}" for name in files]


