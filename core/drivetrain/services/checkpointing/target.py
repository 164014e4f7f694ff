"""What ``save_state`` may do with the path it is given: the user's files are never lost.

* A path that does not exist gets a new checkpoint, renamed into place when complete.
* A directory that holds exactly a drivetrain checkpoint (its manifest, the files the
  manifest lists, hidden temporaries) is replaced atomically: the new checkpoint is
  renamed in and the old one deleted, so a crash keeps one of the two whole.
* Any other directory (one with the user's files in it, an empty one, the current
  directory, one whose parent cannot be written, a symlink to a directory) gets the
  checkpoint written among its files: the previous checkpoint's manifest goes first, the
  new files are moved in, files of the previous checkpoint that the new one does not
  write are removed, and the new manifest comes last. No other file is touched; a new
  file whose name is taken by one of the user's files fails the save instead.
* Anything else there (a file, a FIFO, a symlink to a file, a broken symlink) is refused.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ...kernel.errors import CheckpointError
from . import layout

BESIDE = "beside"  # the temporary directory goes beside the target, for one atomic rename
INSIDE = "inside"  # the temporary directory goes into the target, its files are moved in one by one
# Names save_state leaves in a directory while it works: never the user's.
_OWN_HIDDEN = (layout.TEMP_PREFIX, layout.TRASH_PREFIX, ".synced-", ".failed-")


def refuse_non_directory(final: Path, command: str = "save_state") -> None:
    """Raise when ``final`` is there and is not a directory (nothing written yet); ``command`` is
    who writes the directory, for the message."""
    if final.is_symlink() and not final.exists():
        raise CheckpointError(f"{final} is a broken symbolic link (to {os.readlink(final)}); {command} needs a "
                              "directory: remove the link or choose another path")
    if final.exists() and not final.is_dir():
        raise CheckpointError(f"{final} exists and is not a directory; {command} writes a directory and never "
                              "replaces a file: choose another path")


def placement(final: Path) -> str:
    """Where the temporary directory of a save into ``final`` goes: :data:`BESIDE` or :data:`INSIDE`."""
    refuse_non_directory(final)
    if not final.exists():
        return BESIDE
    parent = final.parent
    cwd = Path.cwd().absolute()
    replaceable = (not final.is_symlink() and parent != final and final != cwd and final not in cwd.parents
                   and os.access(parent, os.W_OK | os.X_OK) and holds_only_a_checkpoint(final))
    return BESIDE if replaceable else INSIDE


def temporary_dir(final: Path, token: str, where: str) -> Path:
    if where == INSIDE:
        return final / f"{layout.TEMP_PREFIX}checkpoint-{token}"
    return layout.temporary_dir_for(final, token)


def checkpoint_contents(directory: Path) -> set[str] | None:
    """Every file a drivetrain checkpoint in ``directory`` consists of, or ``None`` when it holds none."""
    try:
        manifest = json.loads((directory / layout.MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("format_version"), int):
        return None
    names = manifest.get("contents", manifest.get("files"))
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return None
    return {name for name in names if _inside(directory, name)} | {layout.MANIFEST}


def _inside(directory: Path, name: str) -> bool:
    """Whether ``name`` (from a manifest, which could be edited) stays within ``directory``."""
    path = Path(name)
    return not path.is_absolute() and ".." not in path.parts and bool(path.parts)


def files_under(directory: Path) -> tuple[set[str], bool]:
    """Relative names of the files under ``directory`` (save_state's own hidden ones left out), and
    whether anything else is there (a link, a FIFO, an empty folder)."""
    files, other = set(), False
    for root, dirs, names in os.walk(directory):
        base = Path(root)
        dirs[:] = [d for d in dirs if not (base == directory and d.startswith(_OWN_HIDDEN))]
        for d in dirs:
            if (base / d).is_symlink():
                other = True
        if base != directory and not names and not dirs:
            other = True
        for name in names:
            path = base / name
            if base == directory and name.startswith(_OWN_HIDDEN):
                continue
            if path.is_symlink() or not path.is_file():
                other = True
            files.add(path.relative_to(directory).as_posix())
    return files, other


def holds_only_a_checkpoint(directory: Path) -> bool:
    """Whether ``directory`` holds a drivetrain checkpoint and nothing else of anyone's."""
    contents = checkpoint_contents(directory)
    if contents is None:
        return False
    files, other = files_under(directory)
    return not other and files <= contents


def publish(temporary: Path, final: Path, fsync: bool) -> None:
    """Put the complete checkpoint in ``temporary`` (manifest written) at ``final``, by the rules above."""
    refuse_non_directory(final)
    if not final.exists():
        layout.publish(temporary, final, fsync)
    elif temporary.parent == final.parent and not final.is_symlink() and holds_only_a_checkpoint(final):
        layout.publish(temporary, final, fsync)
    else:
        publish_into(temporary, final, fsync)


def publish_into(temporary: Path, final: Path, fsync: bool) -> None:
    """Move a checkpoint's files into a directory that holds other files too, manifest last."""
    new = checkpoint_contents(temporary)
    if new is None:
        raise CheckpointError(f"the checkpoint for {final} has no manifest; nothing was written there")
    new.discard(layout.MANIFEST)
    old = checkpoint_contents(final) or set()
    taken = sorted(name for name in new if name not in old and _occupied(final / name, final, old))
    blocked = sorted(name for name in new if _blocked_by_file(final, name))
    if taken or blocked:
        shown = ", ".join((taken + blocked)[:3]) + (" ..." if len(taken) + len(blocked) > 3 else "")
        raise CheckpointError(f"{final} already holds {shown}, which are not part of a drivetrain checkpoint; "
                              "nothing there was changed: move them, or save the state into another directory")
    # From here the directory never looks like a complete checkpoint until the new manifest is in.
    (final / layout.MANIFEST).unlink(missing_ok=True)
    if fsync:
        layout.fsync_dir(final)
    for name in sorted(old - new - {layout.MANIFEST}):
        _remove_file_of_previous(final, name)
    for name in sorted(new):
        (final / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(temporary / name, final / name)
    os.replace(temporary / layout.MANIFEST, final / layout.MANIFEST)
    if fsync:
        for directory in sorted({(final / name).parent for name in new} | {final}):
            layout.fsync_dir(directory)
    shutil.rmtree(temporary, ignore_errors=True)


def _occupied(path: Path, final: Path, old: set[str]) -> bool:
    """Whether something not of the previous checkpoint holds ``path`` (a folder of its files does not)."""
    if path.is_dir() and not path.is_symlink():
        files, other = files_under(path)
        prefix = path.relative_to(final).as_posix()
        return other or not files or not {f"{prefix}/{name}" for name in files} <= old
    return path.exists() or path.is_symlink()


def _blocked_by_file(final: Path, name: str) -> bool:
    """Whether a folder this file goes into is one of the user's files, or a link out of ``final``."""
    parent = (final / name).parent
    while parent != final:
        if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
            return True
        parent = parent.parent
    return False


def _remove_file_of_previous(final: Path, name: str) -> None:
    path = final / name
    if path.is_symlink() or path.is_file():
        path.unlink()
    parent = path.parent
    while parent != final:  # folders the previous checkpoint made, once empty
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent
