"""``save_state`` / ``load_state`` of DeepSpeed engines, inside drivetrain's crash-safe layout.

A trained engine writes its own checkpoint (``engine.save_checkpoint``: module states,
each process's ZeRO partition of the optimizer, the scheduler, DeepSpeed's
``zero_to_fp32.py``) into ``deepspeed_model_<i>/`` of the temporary checkpoint directory; the
core writes the rest (data loaders, RNG states, ...) and publishes the directory atomically.
The optimizer's state is part of the engine checkpoint, so the optimizer hooks only say so.

An engine without optimizer (a frozen teacher) has nothing but weights: the core writes its
full weights (gathered under ZeRO-3) as for any model, and they are loaded back here.

DeepSpeed's checkpoint files are pickles (``torch.save``). DeepSpeed reads them through its
engine's ``checkpoint_engine``; while ``load_state`` runs, that is replaced by one whose
``load`` is drivetrain's safe loader (``weights_only=True`` with an allow-list of the few
plain data classes DeepSpeed stores), so a file naming anything else is refused and never
runs code. Every file is also verified against the manifest's checksums before DeepSpeed
reads it, and the checkpoint's parameter names, shapes and dtypes are checked against the
engine first (``fit.py``), so a checkpoint of another model changes nothing.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, MutableMapping

from drivetrain.plugin_api import CheckpointError, copy_to_host, safe_torch_load

from .engine import is_engine, is_zero3, load_full_state_dict, trains
from .fit import check_engine_fits

TAG = "state"


def engine_directory(index: int) -> str:
    return f"deepspeed_model_{index}"


# The classes DeepSpeed pickles into its model and optimizer state files besides tensors and
# containers (found with torch.serialization.get_unsafe_globals_in_checkpoint on checkpoints
# of ZeRO stages 0-3, fp32 and bf16): small data holders, safe to rebuild from plain data.
_SAFE_TYPES = (
    ("deepspeed.runtime.fp16.loss_scaler", "LossScaler"),
    ("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler"),
    ("deepspeed.runtime.zero.config", "ZeroStageEnum"),
    ("deepspeed.utils.tensor_fragment", "fragment_address"),
)


def safe_types() -> list[Any]:
    import importlib

    found = []
    for module, name in _SAFE_TYPES:
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):  # another DeepSpeed version: it cannot store what it lacks
            pass
    return found


class _SafeCheckpointEngine:
    """DeepSpeed's checkpoint engine with ``load`` replaced by drivetrain's safe loader.

    ``preloaded`` maps a file's real path to what the pre-load check read from it (on the CPU,
    where DeepSpeed puts its model states too): handed over instead of read again. DeepSpeed
    opens its model states file twice itself (once to see how it was split), so each request
    gets its own copy of the top level and the tensors are shared.
    """

    def __init__(self, inner: Any, preloaded: dict[str, Any] | None = None) -> None:
        self._inner = inner
        self._allowed = safe_types()
        self._preloaded = dict(preloaded or {})

    def load(self, path: str, map_location: Any = None) -> Any:
        found = self._preloaded.get(os.path.realpath(path))
        return dict(found) if found is not None else safe_torch_load(path, self._allowed, map_location)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@contextlib.contextmanager
def _checkpoint_engine_replaced(engine: Any, replace: Callable[[Any], Any], missing: str) -> Iterator[None]:
    """The engine's ``checkpoint_engine`` is ``replace(original)`` inside the block; an engine
    without one is a ``CheckpointError`` ending with ``missing`` (what to do instead)."""
    original = getattr(engine, "checkpoint_engine", None)
    if original is None:
        raise CheckpointError(f"this DeepSpeed engine has no checkpoint_engine; {missing}")
    engine.checkpoint_engine = replace(original)
    try:
        yield
    finally:
        engine.checkpoint_engine = original


def safe_loading(engine: Any, preloaded: dict[str, Any] | None = None) -> contextlib.AbstractContextManager:
    """Every file the engine reads inside the block goes through the safe loader (or is one
    of ``preloaded``: real path -> what was read from it already)."""
    return _checkpoint_engine_replaced(engine, lambda original: _SafeCheckpointEngine(original, preloaded),
                                       "upgrade deepspeed to read its checkpoints safely (drivetrain[deepspeed])")


def save_engine(engine: Any, index: int, directory: str, run: Any,
                options: Mapping[str, Any] | None = None, deferred: Any = None) -> list[str] | None:
    """Write a trained engine's checkpoint; returns the files (listed by the main process).

    ``options`` are ``save_state``'s extra keyword arguments, passed to
    ``engine.save_checkpoint`` as Accelerate does (``client_state``, ``exclude_frozen_parameters``).
    With ``deferred`` (``save_state(blocking=False)``), ``save_checkpoint`` runs here with
    every collective it makes, but each file it saves through its checkpoint engine is copied
    to host memory instead and written by ``deferred`` on the core's commit thread; each
    process then lists the files it wrote itself.
    """
    if not is_engine(engine) or not trains(engine):
        return None
    name = engine_directory(index)
    target = Path(directory) / name
    kwargs = {"client_state": {}, "save_latest": True, **dict(options or {})}  # tools read "latest"
    if deferred is not None:
        staged: list[tuple[Any, str]] = []
        with _staging_saves(engine, staged):
            engine.save_checkpoint(str(target), tag=TAG, **kwargs)
        run.state.wait_for_everyone()  # what save_checkpoint wrote itself ("latest") is on disk
        later = {os.path.realpath(path) for _state, path in staged}
        written_now = [path for path in _files_under(target, directory)
                       if os.path.realpath(os.path.join(directory, path)) not in later]
        writer = engine.checkpoint_engine

        def write() -> list[str]:
            for state, path in staged:
                writer.save(state, path)
            return [os.path.relpath(path, directory) for _state, path in staged]

        deferred.defer(write)
        return written_now if run.state.is_main_process else []
    engine.save_checkpoint(str(target), tag=TAG, **kwargs)
    run.state.wait_for_everyone()  # every process's partition is on disk before the main one lists them
    if not run.state.is_main_process:
        return []
    return _files_under(target, directory)


def _files_under(target: Path, directory: str) -> list[str]:
    files = []
    for root, _dirs, names in os.walk(target):
        for file_name in names:
            files.append(os.path.relpath(os.path.join(root, file_name), directory))
    return sorted(files)


class _StagingCheckpointEngine:
    """DeepSpeed's checkpoint engine with ``save`` copying the state to host memory (training
    changes the tensors next) and keeping it, path and all, to write later."""

    def __init__(self, inner: Any, staged: list[tuple[Any, str]]) -> None:
        self._inner = inner
        self._staged = staged

    def save(self, state_dict: Any, path: str) -> None:
        self._staged.append((copy_to_host(state_dict), path))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _staging_saves(engine: Any, staged: list[tuple[Any, str]]) -> contextlib.AbstractContextManager:
    return _checkpoint_engine_replaced(engine, lambda original: _StagingCheckpointEngine(original, staged),
                                       "save_state() with blocking=True, or upgrade deepspeed (drivetrain[deepspeed])")


def _writer(manifest: Mapping[str, Any]) -> str:
    plugins = manifest.get("plugins") or {}
    return ", ".join(sorted(plugins)) or "an unknown run"


def _load_arguments(engine: Any, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``engine.load_checkpoint``'s keyword arguments from ``load_state``'s (``strict`` means
    ``load_module_strict``), refused before anything is read when the method does not take one."""
    kwargs = {"load_module_strict": True, "load_optimizer_states": True, "load_lr_scheduler_states": True}
    options = dict(options or {})
    if "strict" in options:
        kwargs["load_module_strict"] = bool(options.pop("strict"))
    options.pop("map_location", None)  # DeepSpeed places its states itself
    kwargs.update(options)
    parameters = inspect.signature(engine.load_checkpoint).parameters
    if not any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values()):
        unknown = sorted(name for name in kwargs if name not in parameters or name in ("load_dir", "tag"))
        if unknown:
            taken = sorted(set(parameters) - {"self", "load_dir", "tag"})
            raise CheckpointError(f"load_state() got {unknown}, which DeepSpeed's load_checkpoint does not take here; "
                                  f"drop them (it takes {taken}, and strict)")
    return kwargs


def _check_engine(engine: Any, index: int, directory: str, run: Any, manifest: Mapping[str, Any],
                  options: Mapping[str, Any] | None) -> tuple[dict[str, Any], Path, Any]:
    """Everything that can refuse ``model_<index>``'s engine checkpoint, read without changing
    anything: returns load_checkpoint's arguments and the model states file with its contents."""
    kwargs = _load_arguments(engine, options)
    target = Path(directory) / engine_directory(index)
    if not (target / TAG).is_dir():
        raise CheckpointError(
            f"{directory} holds no DeepSpeed engine checkpoint for model {index} ({engine_directory(index)}/{TAG}/); "
            f"it was written by {_writer(manifest)} with distributed type {manifest.get('distributed_type')!r}. "
            "Load it with the strategy that wrote it, or load its model weights with load_checkpoint_in_model")
    saved_world = manifest.get("world_size")
    if saved_world != run.state.num_processes and engine.zero_optimization_stage() > 0:
        raise CheckpointError(
            f"{directory} was saved by {saved_world} processes and its DeepSpeed ZeRO optimizer state is split "
            f"{saved_world} ways; resume it with {saved_world} processes (or convert it with DeepSpeed's universal "
            "checkpoint tools and load it through DeepSpeed)")
    path, checkpoint = check_engine_fits(engine, index, target, TAG, safe_types(), kwargs)
    return kwargs, path, checkpoint


def check_engines(checked: MutableMapping[Any, tuple[str, int, Path, Any]], models: list[Any], directory: str,
                  run: Any, manifest: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> None:
    """Check every trained engine against its checkpoint before any of them loads; what each
    check read is kept in ``checked`` (the strategy's) for that engine's load:
    ``(directory, index, model states path, contents)``."""
    checked.clear()
    for index, engine in enumerate(models):
        if is_engine(engine) and trains(engine):
            _kwargs, path, checkpoint = _check_engine(engine, index, directory, run, manifest, options)
            checked[engine] = (directory, index, path, checkpoint)


def load_engine(checked_engines: MutableMapping[Any, tuple[str, int, Path, Any]], engine: Any, index: int,
                directory: str, run: Any, manifest: Mapping[str, Any],
                options: Mapping[str, Any] | None = None) -> bool | None:
    """Restore an engine from ``save_engine``'s files (or a frozen ZeRO-3 engine's weights).

    ``options`` are ``load_state``'s model keyword arguments, passed to
    ``engine.load_checkpoint`` as Accelerate does (``strict`` means ``load_module_strict``).
    The model states file that :func:`check_engines` read is handed to DeepSpeed, not read again.
    """
    if not is_engine(engine):
        return None
    if not trains(engine):
        return _load_frozen(engine, index, directory)
    checked = checked_engines.pop(engine, None)
    if checked is not None and checked[:2] == (directory, index):
        kwargs, path, checkpoint = _load_arguments(engine, options), checked[2], checked[3]
    else:  # loaded without the check of every engine first
        kwargs, path, checkpoint = _check_engine(engine, index, directory, run, manifest, options)
    target = Path(directory) / engine_directory(index)
    try:
        with safe_loading(engine, {os.path.realpath(path): checkpoint}):
            loaded, _client_state = engine.load_checkpoint(str(target), tag=TAG, **kwargs)
    except Exception as error:  # past the checks: damage in a file only DeepSpeed reads (its optimizer partitions)
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"DeepSpeed failed loading {target} after its model states were checked "
                              f"({type(error).__name__}: {first}); model {index}'s module weights may already be "
                              "restored from it, its optimizer state is not: load a checkpoint again before "
                              "training on") from error
    if loaded is None:
        raise CheckpointError(f"DeepSpeed could not load its checkpoint from {target}")
    return True


def _load_frozen(engine: Any, index: int, directory: str) -> bool | None:
    if not is_zero3(engine):
        return None  # the core loads whole weights into engine.module
    from drivetrain.plugin_api import read_model_files

    path = Path(directory) / f"model_{index}"
    if not path.exists():
        raise CheckpointError(f"{path} is missing: the checkpoint holds fewer models than were prepared")
    load_full_state_dict(engine, read_model_files(path))
    return True
