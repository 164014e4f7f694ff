"""``save_state`` / ``load_state``: everything a run needs to continue exactly.

The strategy plugin in use writes and reads its models and optimizers (the ``save state``
hooks); the core writes the rest: schedulers, the grad scaler, data loader positions, RNG
states of every process, registered objects, and gradients pending in an accumulation
window. Loading reads and checks every file before changing anything, so a failed load
leaves the run as it was.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

from .. import __version__, environment
from ..errors import CheckpointError
from ..version import PLUGIN_API_VERSION
from . import commit, layout
from .io_pool import FileJobs, shard_bytes, tensor_bytes
from .model_files import read_model_files_later, write_model_files
from .safetensors_io import read_safetensors, write_safetensors
from .tree_io import load_tree_later, save_tree

if TYPE_CHECKING:  # pragma: no cover
    from ..accelerator import Accelerator

logger = logging.getLogger(__name__)
KIND = "drivetrain-run-state"


# ------------------------------------------------------------------ where


def checkpoint_root(accelerator: Accelerator) -> Path:
    if not accelerator.project_dir:
        raise CheckpointError("automatic checkpoint naming needs a project directory: "
                              "Accelerator(project_config=ProjectConfiguration(project_dir=...))")
    return Path(accelerator.project_dir) / "checkpoints"


def output_directory(accelerator: Accelerator, output_dir: str | os.PathLike | None) -> Path:
    config = accelerator.project_configuration
    if config.automatic_checkpoint_naming:
        if output_dir is not None:
            logger.warning("save_state(output_dir) is ignored with automatic_checkpoint_naming; saving under %s",
                           checkpoint_root(accelerator))
        return checkpoint_root(accelerator) / f"checkpoint_{config.iteration}"
    if output_dir is None:
        raise CheckpointError("save_state() needs an output directory, or "
                              "ProjectConfiguration(automatic_checkpoint_naming=True, project_dir=...)")
    return Path(output_dir)


def input_directory(accelerator: Accelerator, input_dir: str | os.PathLike | None) -> Path:
    if input_dir is not None:
        path = Path(input_dir)
        layout.recover(path)
        return path
    if not accelerator.project_configuration.automatic_checkpoint_naming:
        raise CheckpointError("load_state() needs a directory, or automatic_checkpoint_naming=True to take "
                              "the newest checkpoint")
    found = layout.automatic_checkpoints(checkpoint_root(accelerator))
    if not found:
        raise CheckpointError(f"no complete checkpoint under {checkpoint_root(accelerator)}")
    return found[-1][1]


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


# ------------------------------------------------------------------ save


def _gradients(accelerator: Accelerator, skip: set[int]) -> dict[str, torch.Tensor]:
    """Gradients accumulated in an unfinished window, by model index and name.

    Models in ``skip`` were written by their strategy, which lays their parameters out its
    own way (shards): their ``.grad`` cannot be restored by name, so they are left out and
    loading warns that the window's gradients are lost.
    """
    grads = {}
    for index, model in enumerate(accelerator._models):
        if index in skip:
            continue
        for name, parameter in accelerator.unwrap_model(model).named_parameters():
            if parameter.grad is not None:
                grads[f"{index}.{name}"] = parameter.grad
    return grads


def _write_this_process_files(accelerator: Accelerator, directory: Path, safe_serialization: bool,
                              weights: list[Any] | None) -> list[str]:
    """Write what this process owns into ``directory``; returns the file names.

    Strategy plugins write their models and optimizers first; the core then writes the
    rest on a few threads, split into files small enough to keep every thread busy.
    Nothing is synced here: the commit does that (see ``commit.py``).
    """
    run, main = accelerator.run, accelerator.is_main_process
    rank = accelerator.process_index
    written: list[str] = []
    model_states: list[tuple[int, dict[str, Any]]] = []
    trees: list[tuple[str, Any]] = []
    strategy_written: set[int] = set()
    for index, model in enumerate(accelerator._models):
        if weights is not None and index >= len(weights):
            continue  # a pre-hook took this model's weights out: it saves them itself
        files = run.call("drivetrain_save_model_state", model=model, index=index, directory=str(directory),
                         safe_serialization=safe_serialization)
        if files is None:
            state = weights[index] if weights is not None else accelerator.get_state_dict(model, unwrap=True)
            if main:
                model_states.append((index, state))
        else:
            written += list(files)
            strategy_written.add(index)
    for index, optimizer in enumerate(accelerator._optimizers):
        files = run.call("drivetrain_save_optimizer_state", optimizer=optimizer, index=index, directory=str(directory))
        if files is None:
            if main:
                trees.append((f"optimizer_{index}", optimizer.state_dict()))
        else:
            written += list(files)
    if main:
        for name, objects in (("scheduler", accelerator._schedulers), ("dataloader", accelerator._dataloaders),
                              ("custom_checkpoint", accelerator._custom_objects)):
            trees += [(f"{name}_{index}", obj.state_dict()) for index, obj in enumerate(objects)
                      if hasattr(obj, "state_dict")]
        if accelerator.scaler is not None:
            trees.append(("scaler", accelerator.scaler.state_dict()))
        trees.append(("accelerator", {"step": accelerator.step, "sync_gradients": accelerator.sync_gradients,
                                      "iteration": accelerator.project_configuration.iteration}))
    trees.append((f"random_states_{rank}", rng_state(run.platform)))
    grads = _gradients(accelerator, skip=strategy_written) if not accelerator.sync_gradients else {}
    with FileJobs() as jobs:
        total = sum(tensor_bytes(state) for _i, state in model_states) + sum(tensor_bytes(t) for _n, t in trees)
        limit = shard_bytes(total, jobs.threads)
        for index, state in model_states:
            written += _write_model(state, directory, index, safe_serialization, jobs, limit)
        for name, tree in trees:
            written += save_tree(tree, directory / name, jobs=jobs, shard_bytes=limit)
        if grads:
            jobs.submit(write_safetensors, directory / f"gradients_{rank}.safetensors", grads, fsync=False)
            written.append(f"gradients_{rank}.safetensors")
    return written


def _write_model(state: dict[str, Any], directory: Path, index: int, safe_serialization: bool, jobs: FileJobs,
                 limit: int) -> list[str]:
    subdir = f"model_{index}"
    files = write_model_files(state, directory / subdir, max_shard_size=limit, safe_serialization=safe_serialization,
                              fsync=False, jobs=jobs)
    return [f"{subdir}/{name}" for name in files]


def _publisher_rank(accelerator: Accelerator) -> int:
    """The process that publishes this process's files: the main one, or its node's first."""
    if accelerator.project_configuration.save_on_each_node:
        return accelerator.process_index - accelerator.local_process_index
    return 0


def _manifest(accelerator: Accelerator, files: list[str]) -> dict[str, Any]:
    return {
        "kind": KIND,
        "drivetrain_version": __version__,
        "plugin_api_version": PLUGIN_API_VERSION,
        "plugins": {name: accelerator.run.manager.records[name].version for name in accelerator.run.active_plugins},
        "distributed_type": str(accelerator.distributed_type),
        "mixed_precision": accelerator.mixed_precision,
        "world_size": accelerator.num_processes,
        "counts": {"models": len(accelerator._models), "optimizers": len(accelerator._optimizers),
                   "schedulers": len(accelerator._schedulers), "dataloaders": len(accelerator._dataloaders),
                   "custom": len(accelerator._custom_objects)},
        "files": sorted(set(files)),
    }


def _publication(accelerator: Accelerator, results: list[tuple[list[str], Any, int]]) -> commit.Publication:
    """What this process publishes: the files of every process that named it publisher."""
    me, config = accelerator.process_index, accelerator.project_configuration
    group = [rank for rank, (_files, _error, publisher) in enumerate(results) if publisher == me]
    return commit.Publication(
        manifest=_manifest(accelerator, [name for rank in group for name in results[rank][0]]),
        other_ranks=[rank for rank in group if rank != me],
        keep=config.total_limit if config.automatic_checkpoint_naming else None,
        on_published=accelerator._on_checkpoint_saved,
        timeout=float(environment.read_int("CHECKPOINT_COMMIT_TIMEOUT", default=1800)),
    )


def save_run_state(accelerator: Accelerator, output_dir: str | os.PathLike | None, safe_serialization: bool,
                   weights: list[Any] | None) -> Path:
    """Write a checkpoint and start its commit; returns the directory it will have.

    Returns once every process has written its files. The commit (sync, manifest, rename,
    rotation) then runs in the background unless ``DRIVETRAIN_CHECKPOINT_BACKGROUND=0``;
    :func:`finish_commit` waits for it.
    """
    finish_commit(accelerator)
    final = output_directory(accelerator, output_dir).absolute()
    config = accelerator.project_configuration
    if config.automatic_checkpoint_naming and final.exists():
        raise CheckpointError(f"checkpoint {final} already exists; set ProjectConfiguration(iteration=...) past it")
    state = accelerator.state
    token = state.collectives.broadcast_object_list([layout.new_token()], src=0)[0]
    temporary = layout.temporary_dir_for(final, token)
    publisher = _publisher_rank(accelerator)
    if publisher == accelerator.process_index:
        temporary.mkdir(parents=True, exist_ok=True)
    state.wait_for_everyone()
    error = None
    try:
        files = _write_this_process_files(accelerator, temporary, safe_serialization, weights)
    except Exception as exc:  # reported to every process below, so nobody waits forever
        files, error = [], f"{type(exc).__name__}: {exc}"
    results = state.collectives.all_gather_object((files, error, publisher))
    failures = [(rank, err) for rank, (_f, err, _p) in enumerate(results) if err]
    if failures:
        if publisher == accelerator.process_index:
            shutil.rmtree(temporary, ignore_errors=True)
        state.wait_for_everyone()
        details = "; ".join(f"rank {rank}: {err}" for rank, err in failures)
        raise CheckpointError(f"saving {final} failed, the previous checkpoint is untouched: {details}")
    publication = _publication(accelerator, results) if publisher == accelerator.process_index else None
    plan = commit.CommitPlan(temporary=temporary, final=final, rank=accelerator.process_index, files=files,
                             fsync=environment.read_bool("CHECKPOINT_FSYNC", default=True), publication=publication)
    background = environment.read_bool("CHECKPOINT_BACKGROUND", default=True)
    commit.start(plan, background=background)
    if config.automatic_checkpoint_naming:
        config.iteration += 1
    if not background:
        finish_commit(accelerator)
    return final


def finish_commit(accelerator: Accelerator) -> None:
    """Wait for the last save's commit; raise its failure on every process. Collective.

    Every process has a pending commit from the same ``save_state`` call, so every process
    takes part in the gather (which is also a barrier) or none does.
    """
    pending = commit.take_pending()
    if pending is None:
        return
    errors = accelerator.state.collectives.all_gather_object(pending.wait())
    failures = [(rank, error) for rank, error in enumerate(errors) if error]
    if failures:
        details = "; ".join(f"rank {rank}: {error}" for rank, error in failures)
        raise CheckpointError(f"checkpoint {pending.final} was not completed and is not on disk (the previous one "
                              f"is intact): {details}; fix the cause and save again")


# ------------------------------------------------------------------ load


def _count_problem(manifest: dict[str, Any], accelerator: Accelerator) -> str | None:
    counts = manifest.get("counts", {})
    mine = {"models": len(accelerator._models), "optimizers": len(accelerator._optimizers),
            "schedulers": len(accelerator._schedulers)}
    different = [f"{what}: checkpoint {counts.get(what, 0)}, prepared {n}" for what, n in mine.items()
                 if counts.get(what, 0) != n]
    return "; ".join(different) or None


def _read_model_later(directory: Path, index: int, jobs: FileJobs | None = None) -> Callable[[], dict[str, torch.Tensor]]:
    path = directory / f"model_{index}"
    if not path.exists():
        raise CheckpointError(f"{path} is missing: the checkpoint holds fewer models than were prepared")
    return read_model_files_later(path, jobs)


def load_run_state(accelerator: Accelerator, input_dir: str | os.PathLike | None, strict: bool = True) -> Path:
    """Read a checkpoint, check all of it, then restore it into the prepared objects.

    The caller has waited for a pending commit (:func:`finish_commit`) already.
    """
    directory = input_directory(accelerator, input_dir).absolute()
    manifest = layout.read_manifest(directory)
    if manifest.get("kind") != KIND:
        raise CheckpointError(f"{directory} is a {manifest.get('kind')!r} checkpoint, not a run state written by save_state")
    problem = _count_problem(manifest, accelerator)
    if problem:
        raise CheckpointError(f"{directory} does not match what was prepared ({problem}); prepare the same objects "
                              "before load_state()")
    run, rank = accelerator.run, accelerator.process_index
    resized = manifest.get("world_size") != accelerator.num_processes

    # Phase 1: read and check everything (files side by side on a few threads).
    with FileJobs() as jobs:
        pending_models: dict[int, Callable[[], dict[str, torch.Tensor]]] = {}
        if not run.hook("drivetrain_load_model_state").get_hookimpls():
            for index in range(len(accelerator._models)):
                pending_models[index] = _read_model_later(directory, index, jobs)
        pending_trees: dict[str, Callable[[], Any]] = {}
        for name, objects in (("optimizer", accelerator._optimizers), ("scheduler", accelerator._schedulers),
                              ("dataloader", accelerator._dataloaders),
                              ("custom_checkpoint", accelerator._custom_objects)):
            for index, obj in enumerate(objects):
                prefix = directory / f"{name}_{index}"
                if (prefix.with_suffix(".json")).exists():
                    pending_trees[f"{name}_{index}"] = load_tree_later(prefix, jobs=jobs)
                elif name == "custom_checkpoint":
                    raise CheckpointError(f"{prefix}.json is missing: register the same objects before load_state()")
        for name in ("scaler", "accelerator"):
            if (directory / f"{name}.json").exists():
                pending_trees[name] = load_tree_later(directory / name, jobs=jobs)
        rng_prefix = directory / f"random_states_{rank}"
        pending_rng = load_tree_later(rng_prefix, jobs=jobs) if rng_prefix.with_suffix(".json").exists() else None
        grads_file = directory / f"gradients_{rank}.safetensors"
        pending_grads = jobs.submit(read_safetensors, grads_file) if grads_file.exists() and not resized else None
        jobs.wait()
        models = {index: finish() for index, finish in pending_models.items()}
        trees = {key: finish() for key, finish in pending_trees.items()}
        rng = pending_rng() if pending_rng is not None else None
        grads = pending_grads.result() if pending_grads is not None else None
    for key, tree in trees.items():
        if key.startswith("dataloader_") and resized and isinstance(tree, dict) and tree.get("num_processes") not in (
                None, accelerator.num_processes) and tree.get("batches_yielded", tree.get("_num_yielded", 0)):
            raise CheckpointError(
                f"{directory} was saved mid-epoch by {manifest['world_size']} processes; it cannot resume that epoch "
                f"on {accelerator.num_processes}: resume with {manifest['world_size']} processes, or from a "
                "checkpoint saved at an epoch boundary")

    # Phase 2: restore.
    for index, model in enumerate(accelerator._models):
        loaded = run.call("drivetrain_load_model_state", model=model, index=index, directory=str(directory),
                          manifest=manifest)
        if not loaded:
            state_dict = models.get(index)
            if state_dict is None:
                state_dict = _read_model_later(directory, index)()
            accelerator.unwrap_model(model).load_state_dict(state_dict, strict=strict)
    for index, optimizer in enumerate(accelerator._optimizers):
        loaded = run.call("drivetrain_load_optimizer_state", optimizer=optimizer, index=index, directory=str(directory),
                          manifest=manifest)
        if not loaded:
            if f"optimizer_{index}" not in trees:
                raise CheckpointError(f"{directory}/optimizer_{index}.json is missing")
            optimizer.load_state_dict(trees[f"optimizer_{index}"])
    for name, objects in (("scheduler", accelerator._schedulers), ("dataloader", accelerator._dataloaders),
                          ("custom_checkpoint", accelerator._custom_objects)):
        for index, obj in enumerate(objects):
            if f"{name}_{index}" in trees and hasattr(obj, "load_state_dict"):
                obj.load_state_dict(trees[f"{name}_{index}"])
    if accelerator.scaler is not None and "scaler" in trees:
        accelerator.scaler.load_state_dict(trees["scaler"])
    saved = trees.get("accelerator", {})
    accelerator.step = int(saved.get("step", 0))
    if "sync_gradients" in saved:
        accelerator.gradient_state._set_sync_gradients(bool(saved["sync_gradients"]))
    if grads is not None:
        for index, model in enumerate(accelerator._models):
            for name, parameter in accelerator.unwrap_model(model).named_parameters():
                if f"{index}.{name}" in grads:
                    parameter.grad = grads[f"{index}.{name}"].to(parameter.device)
    elif not saved.get("sync_gradients", True):
        logger.warning("%s was saved inside a gradient-accumulation window and its gradients cannot be restored "
                       "here; the resumed run will not match an uninterrupted one exactly", directory)
    if rng is not None:
        set_rng_state(rng, run.platform)
    else:
        logger.warning("%s holds no RNG state for process %d; random draws will differ from the original run",
                       directory, rank)
    config = accelerator.project_configuration
    match = layout.AUTOMATIC_NAME.match(directory.name)
    if config.automatic_checkpoint_naming and match:
        config.iteration = int(match.group(1)) + 1
    return directory
