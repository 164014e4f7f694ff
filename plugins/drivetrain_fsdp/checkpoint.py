"""FSDP models and optimizers in a drivetrain checkpoint (the ``save state`` hooks).

Inside the checkpoint directory the core is writing (a temporary directory renamed into
place once every process has finished), the ``index``-th model and optimizer each get a
directory of their own:

``SHARDED_STATE_DICT``
    ``model_<i>/`` and ``optimizer_<i>/`` are ``torch.distributed.checkpoint`` directories:
    one ``__<rank>_0.distcp`` file per process with that process's shards, and ``.metadata``
    (written by the main process) saying where every slice of every tensor is. Any number of
    processes can read them back; ``drivetrain merge-weights`` turns a model directory into
    one safetensors file. Only tensors go through it: the rest of an optimizer's state
    (hyper-parameters, parameter names) is ``optimizer_<i>/structure.json``, written without
    pickle, and ``.metadata`` is read with an unpickler that builds nothing but metadata.

``FULL_STATE_DICT``
    gathered on the main process: ``model_<i>/model.safetensors`` (what a run without FSDP
    writes, so a plain model loads it) and ``optimizer_<i>/full.json`` + ``.safetensors``
    (the optimizer state keyed by parameter name).

Either kind loads whatever the current ``state_dict_type``; files are found by name.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from drivetrain.plugin_api import CheckpointError, load_tree, read_model_files, save_tree, write_model_files

from .wrap import quiet, version_of

DCP_METADATA = ".metadata"
STRUCTURE = "structure"
FULL_OPTIMIZER = "full"
_MARK = "__dcp__"


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def handles(model: Any, run: Any) -> bool:
    """Whether ``model`` is this run's to save: sharded by FSDP, or filed in the run's FSDP strategy
    by a strategy that composes it (a model split by tensor parallelism alone)."""
    return version_of(model) is not None or any(known is model for known in run.strategy.models)


# ------------------------------------------------------------------ reading DCP safely


class _MetadataUnpickler(pickle.Unpickler):
    """Builds the classes a DCP ``.metadata`` file is made of, and nothing else."""

    _ALLOWED = {
        "torch.distributed.checkpoint.metadata": {"Metadata", "TensorStorageMetadata", "BytesStorageMetadata",
                                                  "TensorProperties", "ChunkStorageMetadata", "MetadataIndex",
                                                  "StorageMeta", "_MEM_FORMAT_ENCODING"},
        "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
        "torch.distributed.checkpoint._hf_utils": {"_HFStorageInfo"},
        "torch.serialization": {"_get_layout"},
        "torch": {"Size"},
        "pathlib": {"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path"},
        "collections": {"OrderedDict"},
        "builtins": {"set", "frozenset"},
    }

    def find_class(self, module: str, name: str) -> Any:
        if name in self._ALLOWED.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise CheckpointError(f"the checkpoint metadata refers to {module}.{name}, which DCP metadata never holds; "
                              "it may run code, so it is not read")


def safe_reader(path: str | os.PathLike) -> Any:
    """A ``FileSystemReader`` whose metadata is read without running code."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            path = Path(self.path) / DCP_METADATA
            try:
                with open(path, "rb") as handle:
                    metadata = _MetadataUnpickler(handle).load()
            except FileNotFoundError:
                raise CheckpointError(f"{path} is missing: not a complete sharded checkpoint") from None
            except CheckpointError:
                raise
            except Exception as error:
                raise CheckpointError(f"{path} is damaged ({type(error).__name__}: {error})") from None
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(os.fspath(path))


def tensor_entries(path: str | os.PathLike) -> dict[str, Any]:
    """Each tensor of a DCP directory: name -> ``TensorStorageMetadata`` (size, dtype)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = safe_reader(path).read_metadata()
    entries = {}
    for key, entry in metadata.state_dict_metadata.items():
        if not isinstance(entry, TensorStorageMetadata):
            raise CheckpointError(f"{path} holds {key!r} as pickled bytes; drivetrain writes tensors only and does "
                                  "not unpickle checkpoint data")
        entries[key] = entry
    return entries


def dcp_load(target: dict[str, Any], path: Path, no_dist: bool = False) -> None:
    """Fill ``target``'s tensors (plain, DTensor or ShardedTensor) from the DCP directory ``path``."""
    import torch.distributed.checkpoint as dcp

    stored = tensor_entries(path)
    missing = sorted(set(target) - set(stored))
    if missing:
        raise CheckpointError(f"{path} does not hold {missing[:5]}{' ...' if len(missing) > 5 else ''}: it was written "
                              "for another model or optimizer")
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        with quiet():
            dcp.load(target, storage_reader=safe_reader(path), no_dist=no_dist)
    except CheckpointError:
        raise
    except CheckpointException as error:  # a BaseException: one line per failed process, not its traceback
        failures = getattr(error, "failures", {}) or {}
        reasons = "; ".join(f"process {rank}: {_reason(failure)}" for rank, failure in sorted(failures.items()))
        raise CheckpointError(f"reading {path} failed ({reasons or error}): a file of it is damaged; load an "
                              "earlier checkpoint") from None
    except Exception as error:
        message = " ".join(str(error).split())[:600]
        raise CheckpointError(f"reading {path} failed: {type(error).__name__}: {message}") from None


def _reason(failure: Any) -> str:
    """``ExceptionType: message`` of one process's failure inside DCP (a wrapped exception)."""
    inner = getattr(failure, "exc", failure)
    text = " ".join(str(inner).split())[:200]
    return f"{type(inner).__name__}: {text}" if text else type(inner).__name__


def dcp_save(state: dict[str, Any], path: Path, relative: str, deferred: Any = None, run: Any = None) -> list[str]:
    """Write ``state`` (tensors only) with DCP; returns the names this process wrote.

    With ``deferred`` (``save_state(blocking=False)``), DCP's ``async_save`` copies the
    shards to host memory now and writes them on its own thread, over a gloo group of its
    own (its collectives then never meet training's); the core's commit thread waits for it
    and learns the names then."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    bad = sorted(key for key, value in state.items() if not isinstance(value, torch.Tensor))
    if bad:
        raise CheckpointError(f"cannot write {bad[:5]} of {relative}: a sharded checkpoint holds tensors only")
    path.mkdir(parents=True, exist_ok=True)
    writer = FileSystemWriter(os.fspath(path), single_file_per_rank=True, sync_files=False, thread_count=1)  # the commit syncs
    if deferred is None:
        with quiet():
            dcp.save(state, storage_writer=writer)
        return _dcp_names(path, relative)
    # One group per saved object: each async_save runs its collectives on a thread of its
    # own, and two saves sharing a group could meet each other's collectives on another rank.
    groups = run.strategy.checkpoint_groups
    if relative not in groups:
        groups[relative] = dist.new_group(backend="gloo")  # made in the same order on every rank
    with quiet():
        response = dcp.async_save(state, storage_writer=writer, process_group=groups[relative])
    written = getattr(response, "upload_completion", response)  # a Future, or torch's newer response

    def finish() -> list[str]:
        written.result()
        return _dcp_names(path, relative)

    deferred.defer(finish)
    return []


def _dcp_names(path: Path, relative: str) -> list[str]:
    rank = _rank()
    names = sorted(name for name in os.listdir(path) if name.startswith(f"__{rank}_"))
    if rank == 0:
        names.append(DCP_METADATA)
    return [f"{relative}/{name}" for name in names]


# ------------------------------------------------------------------ state dicts


def _gather_options(run: Any, model: Any, config: Any = None) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # FSDP1 crashes when asked to "offload" a full state dict that is in CPU memory already.
    offload = not (version_of(model) == 1 and run.state.device.type == "cpu")
    if config is not None and getattr(config, "offload_to_cpu", True) is False:
        offload = False
    return StateDictOptions(full_state_dict=True, cpu_offload=offload)


def full_model_state_dict(model: Any, run: Any) -> dict[str, Any] | None:
    """The whole model's weights, gathered (complete on the main process)."""
    if not handles(model, run):
        return None
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    options = run.strategy.options
    with quiet():
        state = get_model_state_dict(model, options=_gather_options(run, model, options.state_dict_config))
    return {key: value.detach() for key, value in state.items()} if isinstance(state, dict) else state


def _model_of(optimizer: Any, run: Any) -> Any:
    inner = getattr(optimizer, "optimizer", optimizer)
    ids = {id(p) for group in inner.param_groups for p in group["params"]}
    for model in run.strategy.models:
        if any(id(p) in ids for p in model.parameters()):
            return model
    raise CheckpointError("an optimizer's parameters belong to no model prepared with FSDP; pass the model and its "
                          "optimizer to the same accelerator.prepare() call")


def _split(tree: Any, path: str, tensors: dict[str, torch.Tensor]) -> Any:
    """``tree`` with each tensor replaced by a marker naming it in ``tensors``."""
    if isinstance(tree, torch.Tensor):
        tensors[path] = tree
        return {_MARK: path}
    if isinstance(tree, dict):
        return {key: _split(value, f"{path}/{key}", tensors) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        items = [_split(value, f"{path}/{index}", tensors) for index, value in enumerate(tree)]
        return items if isinstance(tree, list) else tuple(items)
    return tree


def _join(tree: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(tree, dict):
        if set(tree) == {_MARK}:
            return tensors[tree[_MARK]]
        return {key: _join(value, tensors) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        items = [_join(value, tensors) for value in tree]
        return items if isinstance(tree, list) else tuple(items)
    return tree


def _optimizer_state(model: Any, inner: Any, options: Any = None) -> dict[str, Any]:
    """The optimizer's state dict by parameter name, without side effects on a fresh optimizer
    (torch initialises an empty state with a zero step to describe it)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    fresh = not inner.state
    with quiet():
        state = get_optimizer_state_dict(model, inner, options=options)
    if fresh:
        inner.state.clear()
        state = {"state": {}, "param_groups": state["param_groups"]}
    return state


# ------------------------------------------------------------------ the hooks


def save_model(model: Any, index: int, directory: str, run: Any, safe_serialization: bool,
               deferred: Any = None, folder: str | None = None) -> list[str] | None:
    """``model``'s state under ``directory/model_<index>`` (``folder`` names another: the
    Accelerate helpers' ``pytorch_model_fsdp_<index>``); the files written, relative to ``directory``."""
    if not handles(model, run):
        return None
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    relative = folder or f"model_{index}"
    path = Path(directory) / relative
    if run.strategy.options.writes_sharded_state:
        with quiet():
            state = get_model_state_dict(model)
        return dcp_save(state, path, relative, deferred, run)
    state = full_model_state_dict(model, run)
    if _rank() != 0:
        return []
    written = write_model_files(state, path, max_shard_size="1000GB", safe_serialization=safe_serialization,
                                fsync=False)
    return [f"{relative}/{name}" for name in written]


def check_checkpoint(models: list[Any], optimizers: list[Any], directory: str, run: Any) -> None:
    """Check every model this run sharded and every optimizer against the checkpoint, before
    any of them loads: a load that fails must leave all of them as they were."""
    fsdp = run.strategy
    fsdp.checked.clear()
    ours = [index for index, model in enumerate(models) if handles(model, run)]
    for index in ours:
        fsdp.checked[(directory, index)] = _check_model(models[index], index, Path(directory), run)
    if ours:
        check_optimizers(run, Path(directory))


def _check_model(model: Any, index: int, directory: Path, run: Any, folder: str | None = None
                 ) -> dict[str, Any] | None:
    """Raise ``CheckpointError`` when ``model_<index>`` (or ``folder``) does not fit ``model``; returns
    the full state dict read (a ``FULL_STATE_DICT`` checkpoint), ``None`` for a sharded one (read at load)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    path = directory / (folder or f"model_{index}")
    with quiet():
        current = get_model_state_dict(model)  # sharded: global shapes, nothing gathered
    if (path / DCP_METADATA).exists():
        stored = {key: (tuple(entry.size), entry.properties.dtype) for key, entry in tensor_entries(path).items()}
        _check_shapes(stored, current, path)
        return None
    if not path.exists():
        raise CheckpointError(f"{path} is missing: the checkpoint holds fewer models than were prepared")
    state = read_model_files(path)
    _check_shapes({key: (tuple(value.shape), value.dtype) for key, value in state.items()}, current, path)
    return state


def load_model(model: Any, index: int, directory: str, run: Any, folder: str | None = None) -> bool | None:
    """Read ``directory/model_<index>`` (or ``folder``) into ``model``, checked before any copy."""
    if not handles(model, run):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

    path = Path(directory) / (folder or f"model_{index}")
    checked = run.strategy.checked
    if folder is None and (directory, index) in checked:
        state = checked.pop((directory, index))
    else:  # loaded without the first phase's check
        if folder is None:
            check_optimizers(run, Path(directory))
        state = _check_model(model, index, Path(directory), run, folder)
    if state is None:
        with quiet():
            # read into copies: a read that fails halfway leaves the model as it was
            target = {key: value.detach().clone() for key, value in get_model_state_dict(model).items()}
        dcp_load(target, path)
        with quiet():
            set_model_state_dict(model, target)
        return True
    with quiet():
        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))
    return True


def _check_shapes(stored: dict[str, tuple[tuple[int, ...], Any]], current: dict[str, Any], path: Path) -> None:
    """Each stored tensor's global shape (and dtype, up to floating casts) against the model's, before any copy."""
    for key, value in current.items():
        if key not in stored or not isinstance(value, torch.Tensor):
            continue
        shape, dtype = stored[key]
        floating = dtype.is_floating_point and value.dtype.is_floating_point
        if shape != tuple(value.shape) or (dtype != value.dtype and not floating):
            raise CheckpointError(f"{path} does not fit: {key} is {shape} {dtype} in the checkpoint but "
                                  f"{tuple(value.shape)} {value.dtype} here; load it into the model that saved it")


def save_optimizer(optimizer: Any, index: int, directory: str, run: Any, deferred: Any = None) -> list[str] | None:
    model = _model_of(optimizer, run)
    inner = getattr(optimizer, "optimizer", optimizer)
    options = run.strategy.options
    relative = f"optimizer_{index}"
    path = Path(directory) / relative
    if options.writes_sharded_state:
        state = _optimizer_state(model, inner)
        tensors: dict[str, torch.Tensor] = {}
        structure = _split(state, "", tensors)
        written = dcp_save(tensors, path, relative, deferred, run)
        if _rank() == 0:
            written += [f"{relative}/{name}" for name in save_tree(structure, path / STRUCTURE)]
        return written
    state = _optimizer_state(model, inner, _gather_options(run, model, options.optim_state_dict_config))
    if _rank() != 0:
        return []
    path.mkdir(parents=True, exist_ok=True)
    return [f"{relative}/{name}" for name in save_tree(state, path / FULL_OPTIMIZER)]


def load_optimizer(optimizer: Any, index: int, directory: str, run: Any) -> bool | None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    model = _model_of(optimizer, run)
    inner = getattr(optimizer, "optimizer", optimizer)
    path = Path(directory) / f"optimizer_{index}"
    if (path / f"{STRUCTURE}.json").exists():
        structure = load_tree(path / STRUCTURE)
        if structure.get("state"):
            current = _check_structure(structure, model, inner, path)
            wanted: dict[str, torch.Tensor] = {}
            names = _marks(structure)
            with quiet():
                for name in names:
                    wanted[name] = current[name].detach().clone()
            dcp_load(wanted, path)
            state = _join(structure, wanted)
        else:
            state = structure
        with quiet():
            set_optimizer_state_dict(model, inner, state)
        if not structure.get("state"):
            inner.state.clear()
        return True
    if (path / f"{FULL_OPTIMIZER}.json").exists():
        state = load_tree(path / FULL_OPTIMIZER)
        with quiet():
            set_optimizer_state_dict(model, inner, state, options=StateDictOptions(full_state_dict=True))
        if not state.get("state"):
            inner.state.clear()
        return True
    raise CheckpointError(f"{path} holds no optimizer state (expected {STRUCTURE}.json or {FULL_OPTIMIZER}.json)")


def _check_structure(structure: dict[str, Any], model: Any, inner: Any, path: Path) -> dict[str, torch.Tensor]:
    """Refuse a sharded optimizer state this optimizer cannot take (other parameter groups, other
    state tensors, other global shapes); returns the optimizer's tensors by name to read into.

    DCP reshards each tensor to any layout of the same global shape (TP, FSDP2, one process),
    so what is left to refuse is a state of another optimizer or model.
    """
    groups = [list(group.get("params", [])) for group in structure.get("param_groups", [])]
    fix = "create the optimizer that saved it (same class and parameter groups) before load_state()"
    if len(groups) != len(inner.param_groups):
        raise CheckpointError(f"{path} holds {len(groups)} parameter groups and this optimizer has "
                              f"{len(inner.param_groups)}; {fix}")
    fresh = not inner.state
    described = _initialised_state(model, inner)
    current: dict[str, torch.Tensor] = {}
    _split(described, "", current)
    mine = [list(group["params"]) for group in described["param_groups"]]
    if fresh:
        inner.state.clear()  # described, not changed
    if [sorted(map(str, group)) for group in groups] != [sorted(map(str, group)) for group in mine]:
        raise CheckpointError(f"{path} holds parameter groups of other parameters than this optimizer's; {fix}")
    names = _marks(structure)
    unknown = sorted(set(names) - set(current))
    if unknown:
        raise CheckpointError(f"{path} holds optimizer state {unknown[:3]} that this optimizer does not have: it was "
                              f"written for another optimizer or model; {fix}")
    stored = tensor_entries(path)
    for name in names:
        shape, here = tuple(stored[name].size) if name in stored else None, tuple(current[name].shape)
        if shape is not None and shape != here:
            raise CheckpointError(f"{path} holds {name} of shape {shape}, this optimizer's is {here}; {fix}")
    return current


def check_optimizers(run: Any, directory: Path) -> None:
    """Check every prepared optimizer against the checkpoint's sharded optimizer state, before a
    model is loaded: a load that fails must leave models and optimizers as they were."""
    for index, optimizer in enumerate(run.strategy.optimizers):
        path = directory / f"optimizer_{index}"
        if not (path / f"{STRUCTURE}.json").exists():
            continue  # not a sharded state: checked where it is read
        structure = load_tree(path / STRUCTURE)
        if structure.get("state"):
            inner = getattr(optimizer, "optimizer", optimizer)
            _check_structure(structure, _model_of(optimizer, run), inner, path)


def _initialised_state(model: Any, inner: Any) -> dict[str, Any]:
    """The optimizer's state dict, its state created when empty: the tensors to read into."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    with quiet():
        return get_optimizer_state_dict(model, inner)


def _marks(tree: Any) -> list[str]:
    found: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if set(node) == {_MARK}:
                found.append(node[_MARK])
            else:
                for value in node.values():
                    visit(value)
        elif isinstance(node, (list, tuple)):
            for value in node:
                visit(value)

    visit(tree)
    return found
