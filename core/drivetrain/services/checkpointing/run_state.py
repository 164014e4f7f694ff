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
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from ...kernel import environment
from ...kernel.errors import CheckpointError, ConfigError
from ...kernel.version import PLUGIN_API_VERSION, __version__
from . import accelerate_layout, checksums, commit, compatibility, layout, leftovers, peers, process_state, remote, state_values
from . import target
from .deferred import DeferredWrites, HostStaging, copy_to_host
from ..other import unwrap_prepared_model
from .io_pool import FileJobs
from .model_files import read_model_files_later
from .process_state import rng_state, set_rng_state
from .safetensors_io import read_safetensors
from .tree_io import load_tree_later

if TYPE_CHECKING:  # pragma: no cover
    from ...runtime.session import Session
    from ...runtime.prepared import PreparedObjects

logger = logging.getLogger("drivetrain.checkpointing.run_state")  # its name before the layers, kept for log filters
KIND = "drivetrain-run-state"


# ------------------------------------------------------------------ where


def checkpoint_root(session: Session) -> Path:
    if not session.project_dir:
        raise CheckpointError("automatic checkpoint naming needs a project directory: "
                              "Accelerator(project_config=ProjectConfiguration(project_dir=...))")
    return Path(session.project_dir) / "checkpoints"


def output_directory(session: Session, output_dir: str | os.PathLike | None) -> Path:
    config = session.project_configuration
    if config.automatic_checkpoint_naming:
        if output_dir is not None:
            logger.warning("save_state(output_dir) is ignored with automatic_checkpoint_naming; saving under %s",
                           checkpoint_root(session))
        return checkpoint_root(session) / f"checkpoint_{config.iteration}"
    if output_dir is None:
        raise CheckpointError("save_state() needs an output directory, or "
                              "ProjectConfiguration(automatic_checkpoint_naming=True, project_dir=...)")
    return Path(output_dir)


def input_directory(session: Session, input_dir: str | os.PathLike | None) -> Path:
    downloaded = remote.fetch_for_load(session, input_dir)  # a URL: its local copy
    if downloaded is not None:
        return downloaded
    if input_dir is not None:
        path = Path(input_dir)
        layout.recover(path)
        return path
    if not session.project_configuration.automatic_checkpoint_naming:
        raise CheckpointError("load_state() needs a directory, or automatic_checkpoint_naming=True to take "
                              "the newest checkpoint")
    root = checkpoint_root(session)
    found = dict(layout.automatic_checkpoints(root))
    numbers = sorted(found)
    if session.num_processes > 1:  # machines without a shared disk may each hold different ones
        numbers = newest_common(peers.gather(session.state, numbers, "load_state()"))
    if not numbers:
        raise CheckpointError(f"no complete checkpoint under {root}" + (
            " on every process" if found else "") + "; pass load_state() a directory, or start without one")
    return found.get(numbers[-1], root / f"checkpoint_{numbers[-1]}")


def newest_common(per_process: list[list[int]]) -> list[int]:
    """The checkpoint numbers complete on every process, oldest first: a checkpoint one process
    finished and another did not (a rank died while writing it) is never the one resumed."""
    common = set(per_process[0]) if per_process else set()
    for numbers in per_process[1:]:
        common &= set(numbers)
    return sorted(common)


# ------------------------------------------------------------------ save


def _write_this_process_files(session: Session, directory: Path,
                              safe_serialization: bool,
                              weights: list[Any] | None, options: dict[str, Any]) -> dict[str, str]:
    """Write what this process owns into ``directory``; returns each file's name and checksum."""
    collected = process_state.collect(session, directory, safe_serialization, weights, options)
    return process_state.write(collected, directory, session.process_index, safe_serialization)


def _publisher_rank(session: Session) -> int:
    """The process that publishes this process's files: the main one, or its node's first."""
    if session.project_configuration.save_on_each_node:
        return session.process_index - session.local_process_index
    return 0


def _manifest(session: Session, files: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": KIND,
        "drivetrain_version": __version__,
        "plugin_api_version": PLUGIN_API_VERSION,
        "plugins": {name: session.run.manager.records[name].version for name in session.run.active_plugins},
        "distributed_type": session.distributed_type.value,
        "mixed_precision": session.mixed_precision,
        "world_size": session.num_processes,
        "platform": session.run.platform.name,  # names the device generator states (an export needs it)
        "counts": session.prepared.counts(),
        # a stateful loader's position is kept in batches: it means nothing over batches of another size
        "loader_batch_sizes": [_batch_size(loader) for loader in session.prepared.dataloaders],
        "files": sorted(files),
        "checksum_algorithm": checksums.ALGORITHM,
        "checksums": dict(sorted(files.items())),
    }


def _batch_size(loader: Any) -> int | None:
    size = getattr(loader, "total_batch_size", None)
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def _check_batch_position(tree: Any, key: str, loader: Any, manifest: dict[str, Any], directory: Path,
                          processes: int) -> None:
    """A position kept only in batches (torchdata's ``StatefulDataLoader`` state) mid-epoch
    resumes only on the layout and batch size that saved it: anything else would skip the
    wrong samples."""
    if not (isinstance(tree, dict) and "_num_yielded" in tree and tree.get("_num_yielded")
            and not tree.get("_iterator_finished")):
        return
    index = int(key.rpartition("_")[2])
    if manifest.get("world_size") != processes:
        raise CheckpointError(
            f"{directory}/{key} was saved mid-epoch by {manifest.get('world_size')} processes with a position in batches "
            f"(a StatefulDataLoader state); it cannot resume that epoch on {processes}: resume with "
            f"{manifest.get('world_size')} processes, or from a checkpoint saved at an epoch boundary")
    sizes = manifest.get("loader_batch_sizes") or []
    saved, current = (sizes[index] if index < len(sizes) else None), _batch_size(loader)
    if saved is not None and current is not None and saved != current:
        raise CheckpointError(
            f"{directory}/{key} was saved mid-epoch with {saved} samples per batch and a position in batches "
            f"(a StatefulDataLoader state); this loader takes {current}: resume with batch size {saved}, or from a "
            "checkpoint saved at an epoch boundary")


def _publication(session: Session,
                 results: list[tuple[list[str], Any, int]]) -> commit.Publication:
    """What this process publishes: the files of every process that named it publisher."""
    me, config = session.process_index, session.project_configuration
    group = [rank for rank, (_files, _error, publisher) in enumerate(results) if publisher == me]
    return commit.Publication(
        manifest=_manifest(session, {name: digest for rank in group for name, digest in results[rank][0].items()}),
        other_ranks=[rank for rank in group if rank != me],
        keep=config.total_limit if config.automatic_checkpoint_naming else None,
        on_published=session.on_checkpoint_saved,
        timeout=_commit_timeout(session),
    )


def _commit_timeout(session: Session) -> float:
    """How long the publisher waits for the others' files: the run's collective timeout, as for
    any wait on a peer, unless ``DRIVETRAIN_CHECKPOINT_COMMIT_TIMEOUT`` gives the commit its own."""
    own = environment.read_checked("CHECKPOINT_COMMIT_TIMEOUT")
    return float(own) if own is not None else peers.timeout_seconds(session.state)


def agreed_directory(session: Session, directory: Path | str, action: str, token: Any = "") -> Any:
    """Check that every process names the same checkpoint directory; returns the main process's ``token``.

    One object gather (bounded by the process group's timeout): processes that each pass
    their own directory (a ``tempfile.mkdtemp()`` per process) would otherwise each write
    part of a checkpoint, or wait forever for each other's files.
    """
    if session.num_processes == 1:
        return token
    gathered = peers.gather(session.state, (str(directory), token), action)
    paths = [path for path, _token in gathered]
    if len(set(paths)) > 1:
        shown = ", ".join(f"rank {rank}: {path}" for rank, path in enumerate(paths[:4]))
        raise CheckpointError(f"{action} got a different directory on each process ({shown}{' ...' if len(paths) > 4 else ''}); "
                              "pass the same path on every process (choose it on the main process and broadcast it)")
    return gathered[0][1]


def _target_plan(final: Path) -> tuple[str, str, str | None]:
    """The main process's token, where the temporary directory goes, and why ``final`` is refused."""
    try:
        return layout.new_token(), target.placement(final), None
    except CheckpointError as error:
        return "", "", str(error)


def save_run_state(session: Session, output_dir: str | os.PathLike | None,
                   safe_serialization: bool,
                   weights: list[Any] | None, options: dict[str, Any] | None = None,
                   blocking: bool = True) -> Path | str:
    """Write a checkpoint and commit it; returns its directory (or URL), in place and rotated.

    The commit (sync, manifest, rename, rotation) runs before returning, as callers written
    for Accelerate expect; ``DRIVETRAIN_CHECKPOINT_BACKGROUND=1`` runs it in a thread instead,
    and :func:`finish_commit` waits for it. With ``blocking=False`` even the writing runs in
    that thread: this returns once the state is copied to host memory (see
    :func:`_save_in_background`). ``options`` go to the strategy's model-save hook.
    """
    finish_commit(session)
    upload = remote.plan_upload(session, output_dir)  # a URL: written to a staging directory first
    final = upload.staging if upload else output_directory(session, output_dir).absolute()
    config = session.project_configuration
    if config.automatic_checkpoint_naming and final.exists():
        raise CheckpointError(f"checkpoint {final} already exists; set ProjectConfiguration(iteration=...) past it")
    state = session.state
    token, where, problem = agreed_directory(session, upload.store.url if upload else final, "save_state()",
                                             _target_plan(final))
    if problem:
        raise CheckpointError(problem)
    temporary = target.temporary_dir(final, token, where)
    publisher = _publisher_rank(session)
    problem = None
    owner = publisher == session.process_index and not upload
    if owner:  # what saves stopped by a signal left here, unless their writer still runs
        leftovers.remove_abandoned(*leftovers.around(final))
    if publisher == session.process_index or upload:  # uploads: each machine stages its own files
        try:
            temporary.mkdir(parents=True, exist_ok=True)
            if owner:
                leftovers.record_writer(temporary)
        except OSError as exc:
            problem = (f"cannot save the state into {final}: creating {temporary} failed "
                       f"({exc.strerror or exc}); choose a directory you can write to")
    problems = [p for p in peers.gather(state, problem, f"saving {final}") if p]  # also the barrier before writing
    if problems:
        raise CheckpointError(problems[0])
    if not blocking:
        with leftovers.remove_on_interrupt(temporary, owner):
            _save_in_background(session, final, temporary, publisher, safe_serialization, weights,
                                options or {}, upload)
        return upload.store.url if upload else final
    error = None
    with leftovers.remove_on_interrupt(temporary, owner):  # a Ctrl-C mid-save leaves nothing behind
        try:
            files = _write_this_process_files(session, temporary, safe_serialization, weights,
                                              options or {})
        except Exception as exc:  # reported to every process below, so nobody waits forever
            files, error = {}, f"{type(exc).__name__}: {exc}"
        results = peers.gather(state, (files, error, publisher), f"saving {final}")
    _raise_failures(session, final, temporary, publisher, [err for _f, err, _p in results], upload)
    publication = _publication(session, results) if publisher == session.process_index else None
    plan = commit.CommitPlan(temporary=temporary, final=final, rank=session.process_index, files=list(files),
                             fsync=environment.read_bool("CHECKPOINT_FSYNC", default=True), publication=publication,
                             upload=upload)
    background = environment.read_bool("CHECKPOINT_BACKGROUND", default=False)
    commit.start(plan, background=background)
    if config.automatic_checkpoint_naming:
        config.iteration += 1
    if not background:
        finish_commit(session)
    return upload.store.url if upload else final


def _raise_failures(session: Session, final: Path, temporary: Path, publisher: int,
                    errors: list[str | None], upload: remote.Upload | None = None) -> None:
    """Raise on every process when a process failed to save (each process's error, by rank),
    once the temporary directory is removed (by every process of an upload, each staging its
    own): the previous checkpoint is untouched."""
    failures = [(rank, err) for rank, err in enumerate(errors) if err]
    if not failures:
        return
    if publisher == session.process_index or upload:
        shutil.rmtree(temporary, ignore_errors=True)
    peers.barrier(session.state, f"saving {final}")
    details = "; ".join(f"rank {rank}: {err}" for rank, err in failures)
    raise CheckpointError(f"saving {final} failed, the previous checkpoint is untouched: {details}")


# The host buffers of this process's non-blocking saves, reused from one save to the next.
_staging = HostStaging()


def _save_in_background(session: Session, final: Path, temporary: Path,
                        publisher: int, safe_serialization: bool, weights: list[Any] | None,
                        options: dict[str, Any], upload: remote.Upload | None = None) -> None:
    """``save_state(blocking=False)``: copy the state to host memory, write it in the commit's thread.

    On the training thread: the strategy's save hooks (which may defer their writing, see
    :class:`~.deferred.DeferredWrites`), a copy of every state the core writes, and one
    gather so that a failure stops every process now. The commit's thread then writes and
    hashes the files, syncs them, and tells the publisher through its marker file (which
    carries the files' checksums: no collective runs beside training); the publisher writes
    the manifest once every marker is there and renames the checkpoint into place. One
    copy is in memory at a time: the next save, ``load_state``, ``wait_for_checkpoint``,
    ``wait_for_everyone`` and ``end_training`` wait for this one first.
    """
    state, config = session.state, session.project_configuration
    error = None
    try:
        collected = process_state.collect(session, temporary, safe_serialization, weights, options,
                                          deferred=DeferredWrites())
        _staging.begin()
        collected.model_states = [(index, copy_to_host(model, _staging, ("model", index)))
                                  for index, model in collected.model_states]
        collected.trees = [(name, copy_to_host(tree, _staging, ("tree", name))) for name, tree in collected.trees]
        collected.grads = copy_to_host(collected.grads, _staging, ("grads",))
        _staging.end()
    except Exception as exc:  # reported to every process below, so nobody waits forever
        error = f"{type(exc).__name__}: {exc}"
    results = peers.gather(state, (error, publisher), f"saving {final}")
    _raise_failures(session, final, temporary, publisher, [err for err, _p in results], upload)
    publication = None
    me = session.process_index
    if publisher == me:
        group = [rank for rank, (_err, chosen) in enumerate(results) if chosen == me]
        publication = commit.Publication(
            manifest=_manifest(session, {}), other_ranks=[rank for rank in group if rank != me],
            keep=config.total_limit if config.automatic_checkpoint_naming else None,
            on_published=session.on_checkpoint_saved, timeout=_commit_timeout(session),
            files_from_markers=True)
    rank = session.process_index

    def write() -> list[str]:
        digests = process_state.write(collected, temporary, rank, safe_serialization)
        plan.digests = digests
        return list(digests)

    plan = commit.CommitPlan(temporary=temporary, final=final, rank=rank, files=[],
                             fsync=environment.read_bool("CHECKPOINT_FSYNC", default=True), publication=publication,
                             write=write, upload=upload)
    commit.start(plan, background=True)
    if config.automatic_checkpoint_naming:
        config.iteration += 1


def finish_commit(session: Session) -> None:
    """Wait for the last save's commit; raise its failure on every process. Collective.

    Every process has a pending commit from the same ``save_state`` call, so every process
    takes part in the gather (which is also a barrier) or none does.
    """
    pending = commit.take_pending()
    if pending is None:
        return
    error = pending.wait()
    if error is not None and not pending.final.parent.exists():
        # The directory it was going into was deleted under the commit (a temporary one the
        # caller removed): there is no checkpoint left to protect, so later saves go on.
        logger.warning("checkpoint %s was not completed, and the directory it was going into is gone: %s",
                       pending.final, error)
        error = None
    errors = peers.gather(session.state, error, f"completing checkpoint {pending.final}")
    failures = [(rank, error) for rank, error in enumerate(errors) if error]
    if failures:
        details = "; ".join(f"rank {rank}: {error}" for rank, error in failures)
        raise CheckpointError(f"checkpoint {pending.final} was not completed and is not on disk (the previous one "
                              f"is intact): {details}; fix the cause and save again")


# ------------------------------------------------------------------ load


def _count_problem(manifest: dict[str, Any], prepared: PreparedObjects) -> str | None:
    counts = manifest.get("counts", {})
    mine = {"models": len(prepared.models), "optimizers": len(prepared.optimizers),
            "schedulers": len(prepared.schedulers)}
    different = [f"{what}: checkpoint {counts.get(what, 0)}, prepared {n}" for what, n in mine.items()
                 if counts.get(what, 0) != n]
    # A loader without a saved position would start its epoch over, silently: refused. Fewer
    # loaders than saved is a run that loads the model first and prepares its loaders later.
    loaders = len(prepared.dataloaders)
    if isinstance(counts.get("dataloaders"), int) and loaders > counts["dataloaders"]:
        different.append(f"dataloaders: checkpoint {counts['dataloaders']}, prepared {loaders}")
    return "; ".join(different) or None


def _read_model_later(directory: Path, index: int, jobs: FileJobs | None = None,
                      verifier: checksums.Verifier | None = None,
                      manifest: dict[str, Any] | None = None) -> Callable[[], dict[str, torch.Tensor]]:
    path = directory / f"model_{index}"
    if not path.exists():
        raise CheckpointError(f"{path} is missing: the checkpoint holds fewer models than were prepared")
    if manifest is not None and path.is_dir() and not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        # a strategy's own format (sharded, engine checkpoints) that this run's strategy does not read
        plugins = sorted((manifest.get("plugins") or {}))
        raise CheckpointError(f"{path} holds no weight files the core reads: it was written in a strategy's own "
                              f"format (plugins {plugins}); load it under that strategy (any layout of it), or "
                              "convert it to full weights first (drivetrain merge-weights)")
    return read_model_files_later(path, jobs, verifier)


_MODEL_OPTIONS = ("strict", "assign", "map_location")
_LOAD_OPTIONS = ("map_location", "weights_only", "mmap")


def load_options(session: Session, model_options: dict[str, Any], load_kwargs: dict[str, Any] | None
                 ) -> tuple[dict[str, Any], torch.device | str]:
    """Check ``load_state``'s keyword arguments; returns the model ones and where object states go.

    As in Accelerate, ``load_model_func_kwargs`` are for the model's load function
    (``strict``, ``assign``; ``map_location`` places the other states) and ``load_kwargs``
    are what ``torch.load`` would take. Nothing here is a pickle, so ``weights_only`` and
    ``mmap`` change nothing; an unknown name is an error rather than silently dropped.
    """
    unknown = sorted(set(model_options) - set(_MODEL_OPTIONS))
    if unknown and not session.run.hook("drivetrain_load_model_state").get_hookimpls():
        raise CheckpointError(f"load_state() got {unknown}, which loading a model does not take; it takes "
                              f"{list(_MODEL_OPTIONS)} (and load_kwargs={{...}} for {list(_LOAD_OPTIONS)})")
    load_kwargs = dict(load_kwargs or {})
    unknown = sorted(set(load_kwargs) - set(_LOAD_OPTIONS))
    if unknown:
        raise CheckpointError(f"load_state(load_kwargs=...) got {unknown}; it takes {list(_LOAD_OPTIONS)}")
    location = load_kwargs.get("map_location", model_options.get("map_location")) or "cpu"
    if location == "on_device":
        location = session.device
    return model_options, _existing_device(session, location)


def _existing_device(session: Session, location: Any) -> torch.device | str:
    """``location`` when it is a device this process has (the host, or one of its platform's);
    ``CheckpointError`` before anything is read otherwise."""
    platform = session.state.platform
    own, count = platform.device_type, platform.device_count()
    fix = f"pass 'cpu', 'on_device' or one of this process's devices ({own}:0 to {own}:{count - 1})" if count \
        else "pass 'cpu' or 'on_device'"
    try:
        device = torch.device(location) if isinstance(location, (str, torch.device)) else None
    except (RuntimeError, ValueError):
        device = None
    if device is None:
        raise CheckpointError(f"load_state(map_location={location!r}) is not a device: {fix}")
    if device.type == "cpu":
        return location
    if device.type != own or not 0 <= (device.index or 0) < count:
        raise CheckpointError(f"load_state(map_location={location!r}) names a device this process does not have "
                              f"(its platform, {platform.name}, has {count} {own} device(s)): {fix}")
    return location


def _gather_failure(session: Session, error: str | None, what: str) -> None:
    """Fail every process when any failed (a collective: every process calls it)."""
    if session.num_processes == 1:
        return
    errors = peers.gather(session.state, error, what)
    failures = [(rank, message) for rank, message in enumerate(errors) if message]
    if failures:
        rank, message = failures[0]
        raise CheckpointError(message if rank == session.process_index else
                              f"{what} failed on process {rank}: {message}")


def load_run_state(session: Session, input_dir: str | os.PathLike | None,
                   strict: bool = True,
                   options: dict[str, Any] | None = None, load_kwargs: dict[str, Any] | None = None) -> Path | str:
    """Read a checkpoint, check all of it, then restore it into the prepared objects; returns
    its directory, or its URL when it was downloaded from one.

    Phase 1 reads every file this process needs, verifies each against its checksum, and
    checks every state against the object it is for; it ends with one gather, so a failure
    on any process fails all of them before anything changed. Phase 2 copies. The caller has
    waited for a pending commit (:func:`finish_commit`) already.
    """
    options = dict(options or {})
    options.setdefault("strict", strict)
    options, location = load_options(session, options, load_kwargs)
    directory = input_directory(session, input_dir).absolute()
    # A URL's local copies may lie in a different folder on each machine: the URL is what must agree.
    agreed_directory(session, remote.source_of(directory) or directory, "load_state()")
    if session.local_process_index == 0:  # what saves stopped by a signal left beside it
        leftovers.remove_abandoned(*leftovers.around(directory))
    try:
        read = _read_and_check(session, directory, options, location)
        error = None
    except CheckpointError as exc:
        read, error = None, str(exc)
        if session.num_processes == 1:
            raise
    _gather_failure(session, error, f"loading {directory}")
    assert read is not None
    _check_strategy_states(session, directory, read["manifest"], options)
    _restore(session, directory, read, options)
    return remote.source_of(directory) or directory  # a URL's checkpoint is named by its URL


def _check_strategy_states(session: Session, directory: Path,
                           manifest: dict[str, Any],
                           options: dict[str, Any]) -> None:
    """Let strategy plugins check every model and optimizer they load, before any load.

    Their checks may be collective (a sharded model's state dict), so they run once every
    process has read and checked the rest, and agree on their outcome in turn.
    """
    hook = session.run.hook("drivetrain_check_checkpoint")
    if not hook.get_hookimpls():
        return
    error = None
    try:
        session.run.call("drivetrain_check_checkpoint", models=list(session.prepared.models),
                             optimizers=list(session.prepared.optimizers), directory=str(directory),
                             manifest=manifest, options=dict(options))
    except CheckpointError as exc:
        error = str(exc)
        if session.num_processes == 1:
            raise
    _gather_failure(session, error, f"loading {directory}")


def _read_and_check(session: Session, directory: Path, options: dict[str, Any],
                    location: torch.device | str) -> dict[str, Any]:
    run = session.run
    if accelerate_layout.is_accelerate_layout(directory):
        counts = {"models": len(session.prepared.models), "optimizers": len(session.prepared.optimizers),
                  "schedulers": len(session.prepared.schedulers), "dataloaders": len(session.prepared.dataloaders),
                  "custom_objects": len(session.prepared.custom_objects)}
        read = accelerate_layout.read_checkpoint(
            directory, counts, session.process_index, location, run.platform.name,
            session.device.index or 0, strategy_loads_models=bool(run.hook("drivetrain_load_model_state").get_hookimpls()))
        _check_read(session, directory, read, options, read.pop("rng_file"))
        return read
    manifest = layout.read_manifest(directory)
    if manifest.get("kind") != KIND:
        raise CheckpointError(f"{directory} is a {manifest.get('kind')!r} checkpoint, not a run state written by save_state")
    problem = _count_problem(manifest, session.prepared)
    if problem:
        raise CheckpointError(f"{directory} does not match what was prepared ({problem}); prepare the same objects "
                              "before load_state()")
    verifier = checksums.Verifier.for_manifest(directory, manifest)
    rank = session.process_index
    resized = manifest.get("world_size") != session.num_processes

    # Read everything (files side by side on a few threads), verifying checksums as the bytes pass.
    with FileJobs() as jobs:
        pending_models: dict[int, Callable[[], dict[str, torch.Tensor]]] = {}
        if not run.hook("drivetrain_load_model_state").get_hookimpls():
            for index in range(len(session.prepared.models)):
                pending_models[index] = _read_model_later(directory, index, jobs, verifier, manifest)
        pending_trees: dict[str, Callable[[], Any]] = {}
        for name, objects in (("optimizer", session.prepared.optimizers), ("scheduler", session.prepared.schedulers),
                              ("dataloader", session.prepared.dataloaders),
                              ("custom_checkpoint", session.prepared.custom_objects)):
            for index, obj in enumerate(objects):
                prefix = directory / f"{name}_{index}"
                device = location if name == "custom_checkpoint" else "cpu"
                if (prefix.with_suffix(".json")).exists():
                    pending_trees[f"{name}_{index}"] = load_tree_later(prefix, device, jobs=jobs, verifier=verifier)
                elif name == "custom_checkpoint":
                    raise CheckpointError(f"{prefix}.json is missing: register the same objects before load_state()")
        for name in ("scaler", "accelerator"):
            if (directory / f"{name}.json").exists():
                pending_trees[name] = load_tree_later(directory / name, jobs=jobs, verifier=verifier)
        rng_prefix = directory / f"random_states_{rank}"
        pending_rng = (load_tree_later(rng_prefix, jobs=jobs, verifier=verifier)
                       if rng_prefix.with_suffix(".json").exists() else None)
        grads_file = directory / f"gradients_{rank}.safetensors"
        pending_grads = (jobs.submit(read_safetensors, grads_file, "cpu", verifier)
                         if grads_file.exists() and not resized else None)
        jobs.wait()
        models = {index: finish() for index, finish in pending_models.items()}
        trees = {key: finish() for key, finish in pending_trees.items()}
        rng = pending_rng() if pending_rng is not None else None
        grads = pending_grads.result() if pending_grads is not None else None
        # The files only plugins read (sharded and engine checkpoints), split across processes.
        for path in verifier.share_of_rest(rank, session.num_processes):
            jobs.submit(verifier.verify_file, path)
        jobs.wait()

    # Check every state against its object before anything is changed.
    for key, tree in trees.items():
        # A position kept in samples resumes on any number of processes (data_loader.progress);
        # one kept only in batches (torchdata's StatefulDataLoader) means nothing on another layout.
        if key.startswith("dataloader_") and resized and isinstance(tree, dict) and tree.get("num_processes") not in (
                None, session.num_processes) and tree.get("batches_yielded", tree.get("_num_yielded", 0)) and not (
                tree.get("samples_yielded") or tree.get("total_batch_size")):
            raise CheckpointError(
                f"{directory} was saved mid-epoch by {manifest['world_size']} processes with a position in batches; "
                f"it cannot resume that epoch on {session.num_processes}: resume with {manifest['world_size']} "
                "processes, or from a checkpoint saved at an epoch boundary")
        if key.startswith("dataloader_"):
            _check_batch_position(tree, key, session.prepared.dataloaders[int(key.rpartition("_")[2])], manifest, directory,
                                  session.num_processes)
    read = {"manifest": manifest, "models": models, "trees": trees, "rng": rng, "grads": grads}
    _check_read(session, directory, read, options, str(rng_prefix) + ".json", grads_file)
    return read


def _check_read(session: Session, directory: Path, read: dict[str, Any],
                options: dict[str, Any], rng_file: Any, grads_file: Path | None = None) -> None:
    """Every state read against the object it is for, before anything is changed."""
    run = session.run
    models, trees, rng, grads = read["models"], read["trees"], read["rng"], read["grads"]
    sources = read.get("sources", {})  # each tree's file where its name is not {directory}/{key}
    for index, state in models.items():
        compatibility.check_model(state, unwrap_prepared_model(session.run, session.prepared.models[index]),
                                  f"{directory}/model_{index}", bool(options.get("strict", True)))
    if not run.hook("drivetrain_load_optimizer_state").get_hookimpls():
        for index, optimizer in enumerate(session.prepared.optimizers):
            if f"optimizer_{index}" not in trees:
                raise CheckpointError(f"{directory}/optimizer_{index}.json is missing")
            compatibility.check_optimizer(trees[f"optimizer_{index}"], optimizer,
                                          sources.get(f"optimizer_{index}", f"{directory}/optimizer_{index}"))
    for name, objects in (("scheduler", session.prepared.schedulers), ("dataloader", session.prepared.dataloaders),
                          ("custom_checkpoint", session.prepared.custom_objects)):
        for index, obj in enumerate(objects):
            key = f"{name}_{index}"
            where = sources.get(key, f"{directory}/{key}")
            if key in trees and name == "dataloader":
                _check_loader_state(trees[key], obj, where)
            elif key in trees and hasattr(obj, "state_dict"):
                compatibility.check_tree(trees[key], obj.state_dict(), where)
    if "accelerator" in trees:
        state_values.check_run_values(trees["accelerator"], sources.get("accelerator", f"{directory}/accelerator.json"))
    if session.scaler is not None and "scaler" in trees:
        compatibility.check_tree(trees["scaler"], session.scaler.state_dict(), f"{directory}/scaler")
    if grads is not None:
        for index, model in models.items():
            own = dict(unwrap_prepared_model(session.run, session.prepared.models[index]).named_parameters())
            compatibility.check_tree({k.partition(".")[2]: v for k, v in grads.items() if k.startswith(f"{index}.")},
                                     {k: p.detach() for k, p in own.items()}, f"{grads_file}")
    if rng is not None:
        compatibility.check_rng(rng, rng_state(run.platform), str(rng_file))


def _check_loader_state(saved: Any, loader: Any, where: str) -> None:
    """A data loader's state against the loader: its kind and every value, by the loader's own
    ``check_state_dict`` (a prepared loader's), else as any other state tree."""
    check = getattr(loader, "check_state_dict", None)
    if check is None:
        if hasattr(loader, "state_dict"):
            compatibility.check_tree(saved, loader.state_dict(), where)
        return
    try:
        check(saved)
    except ConfigError as error:
        raise CheckpointError(f"{where} cannot be loaded into data loader: {error}") from None


def _restore(session: Session, directory: Path, read: dict[str, Any],
             options: dict[str, Any]) -> None:
    """Copy what phase 1 read and checked. Strategy plugins go first: they check before they change."""
    run, rank = session.run, session.process_index
    manifest, models, trees, rng, grads = read["manifest"], read["models"], read["trees"], read["rng"], read["grads"]
    left: list[int] = []
    for index, model in enumerate(session.prepared.models):
        if not run.call("drivetrain_load_model_state", model=model, index=index, directory=str(directory),
                        manifest=manifest, options=dict(options)):
            left.append(index)
    optimizers_left: list[int] = []
    for index, optimizer in enumerate(session.prepared.optimizers):
        if not run.call("drivetrain_load_optimizer_state", optimizer=optimizer, index=index, directory=str(directory),
                        manifest=manifest):
            optimizers_left.append(index)
    model_kwargs = {key: options[key] for key in ("strict", "assign") if key in options}
    for index in left:
        model = unwrap_prepared_model(session.run, session.prepared.models[index])
        state_dict = models.get(index)
        if state_dict is None:  # a strategy is active but left this model to the core
            state_dict = _read_model_later(directory, index, verifier=checksums.Verifier.for_manifest(directory, manifest))()
            compatibility.check_model(state_dict, model, f"{directory}/model_{index}", bool(model_kwargs.get("strict", True)))
        model.load_state_dict(state_dict, **model_kwargs)
    for index in optimizers_left:
        if f"optimizer_{index}" not in trees:
            raise CheckpointError(f"{directory}/optimizer_{index}.json is missing")
        session.prepared.optimizers[index].load_state_dict(trees[f"optimizer_{index}"])
    for name, objects in (("scheduler", session.prepared.schedulers), ("dataloader", session.prepared.dataloaders),
                          ("custom_checkpoint", session.prepared.custom_objects)):
        for index, obj in enumerate(objects):
            if f"{name}_{index}" in trees and hasattr(obj, "load_state_dict"):
                obj.load_state_dict(trees[f"{name}_{index}"])
    if session.scaler is not None and "scaler" in trees:
        session.scaler.load_state_dict(trees["scaler"])
    saved = trees.get("accelerator", {})
    session.step = int(saved.get("step", 0))
    if "sync_gradients" in saved:
        session.gradient_state._set_sync_gradients(bool(saved["sync_gradients"]))
    if grads is not None:
        for index, model in enumerate(session.prepared.models):
            for name, parameter in unwrap_prepared_model(session.run, model).named_parameters():
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
    config = session.project_configuration
    match = layout.AUTOMATIC_NAME.match(directory.name)
    if config.automatic_checkpoint_naming and match:
        config.iteration = int(match.group(1)) + 1
