"""Where checkpoints live on disk, and how one appears there atomically.

A checkpoint is written into a hidden temporary directory beside its final place. When every
process has written and synced its files (``commit.py``), the publishing process adds
``manifest.json`` (the last file), syncs, and renames the directory into place. A directory without a manifest, or a hidden
temporary one, is never taken for a checkpoint; rotation deletes old checkpoints only after
the new one is in place.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from ...kernel.errors import CheckpointError
from .paths import member_file

logger = logging.getLogger("drivetrain.checkpointing.layout")  # its name before the layers, kept for log filters

MANIFEST = "manifest.json"
# 2: state trees may list several tensor files (tree format 2); format 1 is still read.
# 3: the manifest records a checksum of every file; formats 1 and 2 load unverified.
FORMAT_VERSION = 3
TEMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".old-"
AUTOMATIC_NAME = re.compile(r"^checkpoint_(\d+)$")


def temporary_dir_for(final: Path, token: str) -> Path:
    return final.parent / f"{TEMP_PREFIX}{final.name}-{token}"


def new_token() -> str:
    return uuid.uuid4().hex[:12]


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable (a no-op where directories cannot be synced)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def finished_manifest(manifest: dict[str, Any], sizes: dict[str, int]) -> dict[str, Any]:
    """The manifest as written: with every file's size, the format version and the time."""
    return dict(manifest, sizes=sizes, format_version=FORMAT_VERSION, written_at=time.time())


def write_manifest(directory: Path, manifest: dict[str, Any], fsync: bool) -> None:
    sizes = {}
    for name in manifest["files"]:
        try:
            sizes[name] = (directory / name).stat().st_size
        except FileNotFoundError:
            raise CheckpointError(f"{name} was not written into {directory}; the save failed on some process") from None
    manifest = finished_manifest(manifest, sizes)
    path = directory / MANIFEST
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.flush()
        if fsync:
            os.fsync(handle.fileno())


def publish(temporary: Path, final: Path, fsync: bool) -> None:
    """Rename a complete temporary checkpoint into place, replacing an older one of that name."""
    if fsync:
        fsync_dir(temporary)
    trash = None
    if final.exists():
        trash = final.parent / f"{TRASH_PREFIX}{final.name}-{new_token()}"
        os.rename(final, trash)
    os.rename(temporary, final)
    if fsync:
        fsync_dir(final.parent)
    if trash is not None:
        # The old checkpoint is out of the way already; deleting its files can overlap training.
        threading.Thread(target=shutil.rmtree, args=(trash, True), name="drivetrain-checkpoint-cleanup").start()


def recover(final: Path) -> None:
    """Finish a replacement that a crash interrupted between its two renames."""
    if final.exists() or not final.parent.exists():
        return
    for candidate in sorted(final.parent.glob(f"{TRASH_PREFIX}{final.name}-*")):
        if (candidate / MANIFEST).exists():
            os.rename(candidate, final)
            return


# The plugin API version of the last drivetrain that wrote manifests older than format 3:
# any later writer records checksums, so a manifest of a later one claiming an older format
# was edited (to switch verification off, for instance).
_LAST_API_BEFORE_CHECKSUMS = (1, 2)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _strings_to(check: Any) -> Any:
    return lambda value: isinstance(value, dict) and all(isinstance(k, str) and check(v) for k, v in value.items())


# What each field the loaders read must be; a manifest whose field is anything else is damaged.
_FIELDS: dict[str, tuple[Any, str]] = {
    "files": (lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v), "a list of file names"),
    "sizes": (_strings_to(_is_count), "a mapping of file names to sizes"),
    "checksums": (_strings_to(lambda v: isinstance(v, str)), "a mapping of file names to checksums"),
    "checksum_algorithm": (lambda v: isinstance(v, str), "a string"),
    "kind": (lambda v: isinstance(v, str), "a string"),
    "world_size": (lambda v: _is_count(v) and v > 0, "a number of processes"),
    "counts": (_strings_to(_is_count), "a mapping of object kinds to counts"),
    "plugins": (_strings_to(lambda v: v is None or isinstance(v, str)), "a mapping of plugin names to versions"),
    "drivetrain_version": (lambda v: isinstance(v, str), "a string"),
    "plugin_api_version": (lambda v: isinstance(v, str), "a string"),
    "distributed_type": (lambda v: isinstance(v, str), "a string"),
    "mixed_precision": (lambda v: v is None or isinstance(v, str), "a string"),
    "loader_batch_sizes": (lambda v: isinstance(v, list) and all(n is None or (_is_count(n) and n > 0) for n in v),
                           "a list of batch sizes"),
}


def read_manifest(directory: Path) -> dict[str, Any]:
    """The manifest of a complete checkpoint, checked against the files on disk.

    Every field is checked for its type, and every file it names must be a regular file
    inside ``directory`` (:func:`member_file`), before anything is read.
    """
    directory = Path(directory)
    path = directory / MANIFEST
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint {directory} does not exist")
    if not path.exists():
        raise CheckpointError(
            f"{directory} has no {MANIFEST}: it is not a drivetrain checkpoint, or its save never finished; "
            "load an earlier checkpoint"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path} is damaged ({error}); load an earlier checkpoint") from None
    except RecursionError:
        raise CheckpointError(f"{path} is damaged (nested too deeply); load an earlier checkpoint") from None
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise CheckpointError(f"{path} is not a drivetrain manifest")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{directory} was written in checkpoint format {version} by drivetrain "
            f"{manifest.get('drivetrain_version', '?')}; this drivetrain reads up to format {FORMAT_VERSION}: "
            "upgrade drivetrain"
        )
    for field, (valid, what) in _FIELDS.items():
        if field in manifest and not valid(manifest[field]):
            raise CheckpointError(f"{path} is damaged: its {field!r} is not {what}; load an earlier checkpoint")
    if version < FORMAT_VERSION:
        _check_older_format(path, manifest, version)
    names = dict.fromkeys([*manifest.get("files", ()), *manifest.get("sizes", {}), *manifest.get("checksums", {})])
    for name in names:
        member_file(directory, name, path)
    for name, size in manifest.get("sizes", {}).items():
        file = directory / name
        if file.stat().st_size != size:
            raise CheckpointError(f"{file} has {file.stat().st_size} bytes, the manifest says {size}: "
                                  "the file is truncated or damaged; load an earlier checkpoint")
    return manifest


def _check_older_format(path: Path, manifest: dict[str, Any], version: int) -> None:
    """A manifest of an older format loads unverified, with a warning; one that only claims
    to be older (it has what only format 3 writers record) is refused."""
    if "checksums" in manifest or "checksum_algorithm" in manifest:
        raise CheckpointError(f"{path} claims checkpoint format {version} but records checksums, which only format "
                              f"{FORMAT_VERSION} does: the manifest was edited; load an earlier checkpoint")
    api = manifest.get("plugin_api_version", "")
    try:
        writer = tuple(int(part) for part in api.split("."))
    except ValueError:
        writer = ()
    if writer > _LAST_API_BEFORE_CHECKSUMS:
        raise CheckpointError(f"{path} claims checkpoint format {version}, but its writer (plugin API {api}) writes "
                              f"format {FORMAT_VERSION} with checksums: the manifest was edited; load an earlier "
                              "checkpoint")
    logger.warning("%s is of checkpoint format %d, written before checkpoints had checksums: its files are loaded "
                   "without verification; save the state again to add them", path, version)


def is_complete(directory: Path) -> bool:
    return directory.is_dir() and not directory.name.startswith(".") and (directory / MANIFEST).exists()


def automatic_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Complete ``checkpoint_N`` directories under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = AUTOMATIC_NAME.match(child.name)
        if match and is_complete(child):
            found.append((int(match.group(1)), child))
    return sorted(found)


def rotate(root: Path, keep: int, newest: Path | None = None) -> list[Path]:
    """Delete the oldest complete checkpoints beyond ``keep``, and stale temporary ones.

    ``newest`` (the checkpoint just published) always stays, even when its number is lower
    than older ones' (``iteration`` set back by hand), and so does at least one checkpoint.
    """
    removed = []
    checkpoints = [(n, p) for n, p in automatic_checkpoints(root) if newest is None or p != newest]
    others_kept = max(keep, 1) - (1 if newest is not None and is_complete(newest) else 0)
    for _number, path in checkpoints[: max(len(checkpoints) - others_kept, 0)]:
        # Hide it first (one atomic rename): a crash while deleting must not leave a
        # visible checkpoint with some of its files gone.
        trash = root / f"{TRASH_PREFIX}{path.name}-{new_token()}"
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)
        removed.append(path)
    remove_stale_temporaries(root)
    return removed


def remove_stale_temporaries(root: Path, older_than: float = 3600.0) -> None:
    """Delete what interrupted saves left behind (hidden temporary and trash directories).

    Only those untouched for ``older_than`` seconds: a recent one may belong to a save in
    progress on another process or job.
    """
    if not root.is_dir():
        return
    now = time.time()
    for child in root.iterdir():
        if child.name.startswith((TEMP_PREFIX, TRASH_PREFIX)) and child.is_dir():
            try:
                stale = now - child.stat().st_mtime > older_than
            except FileNotFoundError:
                continue
            if stale:
                shutil.rmtree(child, ignore_errors=True)
