"""The one check every reader applies to a file name it found inside a checkpoint.

Manifests, state files, sharded indexes and offload indexes list other files by name. A
name read from a file is data, not a path the user chose: it must stay inside the folder
that holds the listing and name a regular file, so an edited listing cannot make a load
read ``/etc/passwd``, a file of another checkpoint, or a device that never ends
(``/dev/zero``). The name is checked as written (``..`` and absolute paths are refused); a
symbolic link inside the folder is the owner's choice and is followed, but what it reaches
must still be a regular file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ...kernel.errors import CheckpointError


def member_file(directory: str | os.PathLike, name: object, source: str | os.PathLike,
                must_exist: bool = True) -> Path:
    """``directory / name`` when ``name`` (listed by ``source``) is a regular file inside ``directory``.

    Raises ``CheckpointError`` naming ``source`` and the entry otherwise; with
    ``must_exist=False`` a missing file is returned for the caller to report.
    """
    if not isinstance(name, str) or not name or "\x00" in name:
        raise CheckpointError(f"{source} lists {name!r}, which is not a file name; the file is damaged")
    normalized = os.path.normpath(name)
    if os.path.isabs(name) or normalized == os.curdir or normalized.split(os.sep)[0] == os.pardir:
        raise CheckpointError(f"{source} lists {name!r}, outside {directory}: a checkpoint names only files in its "
                              "own folder, so this listing was edited or damaged; load an earlier checkpoint")
    path = Path(directory) / name
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if not must_exist:
            return path
        raise CheckpointError(f"{path} is listed in {source} but missing; the checkpoint is damaged: copy it "
                              "again or load an earlier one") from None
    except OSError as error:
        raise CheckpointError(f"cannot read {path}, listed in {source}: {error.strerror}") from None
    if not stat.S_ISREG(mode):
        raise CheckpointError(f"{source} lists {name!r}, which is not a regular file; the checkpoint is damaged "
                              "or was edited: load an earlier checkpoint")
    return path


def regular_file(path: str | os.PathLike) -> None:
    """Refuse a path the user or a layout named that is not a regular file: a FIFO would
    block its reader forever, a device never end."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing from the checkpoint") from None
    except OSError as error:
        raise CheckpointError(f"{path} cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(mode):
        raise CheckpointError(f"{path} is not a regular file (a FIFO, socket, device or directory): a checkpoint "
                              "holds plain files; replace it with the file that was saved")
