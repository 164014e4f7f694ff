"""Model weights on disk in the layout the Hugging Face ecosystem reads: one
``model.safetensors``, or shards plus ``model.safetensors.index.json``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable

import torch

from ...kernel.errors import CheckpointError
from .checksums import Recorder, Verifier, bytes_digest, file_digest
from .io_pool import FileJobs
from .paths import member_file
from .safe_load import safe_torch_load
from .safetensors_io import read_metadata, read_safetensors, storage_pointer, write_safetensors

SAFE_WEIGHTS = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"
TORCH_WEIGHTS = "pytorch_model.bin"
TORCH_INDEX = "pytorch_model.bin.index.json"
# Names of tied weights that were stored once: {"alias": "stored name"} (a single-file model
# keeps it in its safetensors metadata, a sharded one in its index).
ALIASES_KEY = "drivetrain_aliases"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B)\s*$", re.I)
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(size: int | str) -> int:
    """``"10GB"`` -> 10_000_000_000; integers pass through."""
    if isinstance(size, int):
        return size
    match = _SIZE.match(size)
    if not match:
        raise CheckpointError(f"cannot read the size {size!r}; write it like '10GB', '500MB' or a number of bytes")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def without_shared_tensors(state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Keep one name per tensor memory (tied weights); returns kept tensors and ``alias -> kept``."""
    kept: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    for name, tensor in state_dict.items():
        if not isinstance(tensor, torch.Tensor):
            continue
        pointer = storage_pointer(tensor)
        identity = (pointer, tensor.storage_offset(), tuple(tensor.shape), tensor.dtype) if pointer is not None else None
        if tensor.numel() and identity is not None and identity in seen:
            aliases[name] = seen[identity]
            continue
        if identity is not None:
            seen[identity] = name
        kept[name] = tensor
    return kept, aliases


def _shards(state_dict: dict[str, torch.Tensor], limit: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in state_dict.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > limit:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    return shards


def write_model_files(state_dict: dict[str, torch.Tensor], directory: str | os.PathLike,
                      max_shard_size: int | str = "10GB", safe_serialization: bool = True,
                      fsync: bool = True, jobs: FileJobs | None = None, recorder: Recorder | None = None) -> list[str]:
    """Write weights (sharded when larger than ``max_shard_size``) into ``directory``.

    Each file is written under a temporary name and renamed, so a reader never sees half a
    file. With ``jobs`` the shards are written on its threads and are in place only after
    ``jobs.wait()``. With ``recorder`` each file's checksum is recorded. Returns the names
    written.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if safe_serialization:
        tensors, aliases = without_shared_tensors(state_dict)
    else:  # pickled files keep shared storage themselves
        tensors, aliases = {k: v for k, v in state_dict.items() if isinstance(v, torch.Tensor)}, {}
    shards = _shards(tensors, parse_size(max_shard_size))
    single, index_name = (SAFE_WEIGHTS, SAFE_INDEX) if safe_serialization else (TORCH_WEIGHTS, TORCH_INDEX)
    stem, suffix = single.rsplit(".", 1)
    names = [single] if len(shards) == 1 else [f"{stem}-{i + 1:05d}-of-{len(shards):05d}.{suffix}" for i in range(len(shards))]
    runner = jobs or FileJobs(threads=1)
    metadata = {"format": "pt"}
    if aliases and len(shards) == 1:
        metadata[ALIASES_KEY] = json.dumps(aliases)
    writes = [runner.submit(_write_shard, shard, directory, name, safe_serialization, metadata, fsync, recorder)
              for name, shard in zip(names, shards)]
    written = list(names)
    if len(shards) > 1:
        weight_map = {key: name for name, shard in zip(names, shards) for key in shard}
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index = {"metadata": {"total_size": total, "aliases": aliases}, "weight_map": weight_map}
        # Queued after the shards (the pool runs jobs in order), and written only when they all are.
        runner.submit(_write_index, writes, directory / index_name, index, recorder)
        written.append(index_name)
    if jobs is None:
        runner.wait()
    return written


_SHARD_NAME = re.compile(r"^(model|pytorch_model)-\d{5}-of-\d{5}\.(safetensors|bin)$")


def remove_stale_weight_files(directory: str | os.PathLike, written: list[str]) -> list[str]:
    """Delete weight files of an earlier save into ``directory`` that this save did not write.

    Only names this module writes (``model.safetensors``, its shards and index, and the
    ``pytorch_model`` ones): an index left from a sharded save would otherwise be read
    instead of the new single file. Call it once the new files are in place.
    """
    removed = []
    keep = set(written)
    for path in Path(directory).iterdir():
        name = path.name
        ours = name in (SAFE_WEIGHTS, SAFE_INDEX, TORCH_WEIGHTS, TORCH_INDEX) or _SHARD_NAME.match(name)
        if ours and name not in keep and path.is_file() and not path.is_symlink():
            path.unlink()
            removed.append(name)
    return removed


def _write_index(shard_writes: list[Any], path: Path, index: dict[str, Any], recorder: Recorder | None = None) -> None:
    for write in shard_writes:
        write.result()  # a shard that failed leaves no index pointing at it
    temporary = path.parent / f".{path.name}.partial"
    document = json.dumps(index, indent=2, sort_keys=True).encode("utf-8")
    temporary.write_bytes(document)
    os.replace(temporary, path)
    if recorder is not None:
        recorder.record(path, bytes_digest(document))


def _write_shard(shard: dict[str, torch.Tensor], directory: Path, name: str, safe_serialization: bool,
                 metadata: dict[str, str], fsync: bool, recorder: Recorder | None = None) -> None:
    temporary = directory / f".{name}.partial"
    if safe_serialization:
        write_safetensors(temporary, shard, metadata=metadata, fsync=fsync, recorder=recorder,
                          record_as=directory / name)
    else:
        torch.save({k: v.contiguous() for k, v in shard.items()}, temporary)
        if recorder is not None:
            recorder.record(directory / name, file_digest(temporary))
    os.replace(temporary, directory / name)


def _load_file(path: Path, verifier: Verifier | None = None) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        state = read_safetensors(path, verifier=verifier)
        aliases = tied_aliases(read_metadata(path).get(ALIASES_KEY, "{}"), path)
        for alias, target in aliases.items():
            state[alias] = state[target]
        return state
    if verifier is not None:
        verifier.verify_file(path)
    state = safe_torch_load(path)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} holds {type(state).__name__}, not a dict of tensors; it is not a weights file")
    return state


def tied_aliases(text: str, path: Path) -> dict[str, str]:
    """The tied names a safetensors file's metadata declares (``alias -> stored name``)."""
    try:
        aliases = json.loads(text)
    except (ValueError, RecursionError):
        aliases = None
    if not _string_mapping(aliases):
        raise CheckpointError(f"{path} is damaged: its {ALIASES_KEY} metadata is not a mapping of names")
    return aliases


def read_model_files(checkpoint: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All weights of a checkpoint file, or of a directory (single file or sharded with an index)."""
    return read_model_files_later(checkpoint)()


def read_model_files_later(checkpoint: str | os.PathLike, jobs: FileJobs | None = None,
                           verifier: Verifier | None = None) -> Callable[[], dict[str, torch.Tensor]]:
    """Start reading weights (each file on ``jobs``' threads); call the result for the state dict.

    Which files to read is decided at once, so a missing or damaged index fails here. With
    ``verifier`` each file is checked against its recorded checksum as it is read.
    """
    files, aliases = _weight_files(Path(checkpoint), verifier)
    futures = [(jobs or FileJobs(threads=1)).submit(_load_file, file, verifier) for file in files]

    def finish() -> dict[str, torch.Tensor]:
        state: dict[str, torch.Tensor] = {}
        for future in futures:
            state.update(future.result())
        for alias, target in aliases.items():
            state[alias] = state[target]
        return state

    return finish


def _weight_files(path: Path, verifier: Verifier | None = None) -> tuple[list[Path], dict[str, str]]:
    """The files holding a checkpoint's weights, and the aliases its index declares."""
    if path.is_file():
        return read_index(path, verifier)[:2] if path.name.endswith(".index.json") else ([path], {})
    for index in (SAFE_INDEX, TORCH_INDEX):
        if (path / index).exists():
            return read_index(path / index, verifier)[:2]
    for single in (SAFE_WEIGHTS, TORCH_WEIGHTS):
        if (path / single).exists():
            return [path / single], {}
    raise CheckpointError(f"no model weights in {path}: expected {SAFE_WEIGHTS}, {SAFE_INDEX}, {TORCH_WEIGHTS} "
                          f"or {TORCH_INDEX}")


def read_index(index: Path, verifier: Verifier | None = None) -> tuple[list[Path], dict[str, str], dict[str, str]]:
    """The shard files a sharded checkpoint's index lists, the aliases it declares (tied names
    stored once) and its weight map (name -> file name). Every shard it names must be a
    regular file beside the index; anything else is an error naming the index."""
    def damaged(reason: str) -> CheckpointError:
        return CheckpointError(f"{index} is damaged ({reason}); replace it with the index saved with the shards")

    try:
        raw = index.read_bytes()
        if verifier is not None:
            verifier.check(index, bytes_digest(raw))
        document = json.loads(raw)
    except OSError as error:
        raise CheckpointError(f"cannot read {index}: {error.strerror}") from None
    except ValueError as error:
        raise damaged(str(error)) from None
    except RecursionError:
        raise damaged("nested too deeply") from None
    if isinstance(document, dict) and "weight_map" not in document and _string_mapping(document):
        document = {"weight_map": document}  # the bare form: the weight map alone, no metadata
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not _string_mapping(weight_map):
        raise damaged("its weight_map is not a mapping of weight names to file names")
    metadata = document.get("metadata") or {}
    aliases = (metadata.get("aliases") or {}) if isinstance(metadata, dict) else None
    if not _string_mapping(aliases):
        raise damaged("its metadata.aliases is not a mapping of names")
    files = [member_file(index.parent, name, index) for name in dict.fromkeys(weight_map.values())]
    return files, dict(aliases), dict(weight_map)


def _string_mapping(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
