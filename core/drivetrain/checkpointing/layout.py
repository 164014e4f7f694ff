"""Where checkpoints live on disk, and how one appears there atomically.

A checkpoint is written into a hidden temporary directory beside its final place. When every
process has written and synced its files (``commit.py``), the publishing process adds
``manifest.json`` (the last file), syncs, and renames the directory into place. A directory without a manifest, or a hidden
temporary one, is never taken for a checkpoint; rotation deletes old checkpoints only after
the new one is in place.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from ..errors import CheckpointError

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


def write_manifest(directory: Path, manifest: dict[str, Any], fsync: bool) -> None:
    sizes = {}
    for name in manifest["files"]:
        try:
            sizes[name] = (directory / name).stat().st_size
        except FileNotFoundError:
            raise CheckpointError(f"{name} was not written into {directory}; the save failed on some process") from None
    manifest = dict(manifest, sizes=sizes, format_version=FORMAT_VERSION, written_at=time.time())
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


def read_manifest(directory: Path) -> dict[str, Any]:
    """The manifest of a complete checkpoint, checked against the files on disk."""
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
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if not isinstance(version, int):
        raise CheckpointError(f"{path} is not a drivetrain manifest")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{directory} was written in checkpoint format {version} by drivetrain "
            f"{manifest.get('drivetrain_version', '?')}; this drivetrain reads up to format {FORMAT_VERSION}: "
            "upgrade drivetrain"
        )
    for name, size in manifest.get("sizes", {}).items():
        file = directory / name
        if not file.exists():
            raise CheckpointError(f"{file} is listed in the manifest but missing; the checkpoint is damaged")
        if file.stat().st_size != size:
            raise CheckpointError(f"{file} has {file.stat().st_size} bytes, the manifest says {size}: "
                                  "the file is truncated or damaged; load an earlier checkpoint")
    return manifest


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
