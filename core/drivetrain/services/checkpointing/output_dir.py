"""Where a command that writes a new directory of checkpoint files may write it.

``drivetrain checkpoint export`` and ``merge-weights`` write a directory the user named on
the command line. Both refuse, before reading anything, a destination they could not
write whole (a file, a dangling link, a folder inside the checkpoint being read, a folder
that cannot be written), and an export writes into a hidden sibling renamed into place
at the end: a full disk or a write error leaves no directory that looks complete.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import Iterator

from ...kernel.errors import CheckpointError
from . import layout, target


def is_inside(path: Path, directory: Path) -> bool:
    """Whether ``path`` is ``directory`` or lies under it, links resolved."""
    resolved, container = path.resolve(), directory.resolve()
    return resolved == container or container in resolved.parents


def refuse_unusable_output(output: Path, command: str, source: Path | None = None,
                           source_role: str = "the checkpoint it reads") -> None:
    """Raise ``CheckpointError`` when ``command`` could not write the directory ``output`` whole.

    Args:
        output: the directory the user asked for.
        command: the command's name, for the message (``checkpoint export``, ``merge-weights``).
        source: a directory ``output`` must not lie in (``None``: no such rule).
        source_role: what ``source`` is, for the message.
    """
    target.refuse_non_directory(output, command)
    if source is not None and is_inside(output, source):
        raise CheckpointError(f"{output} is inside {source}, {source_role}; {command} would write into what it "
                              "reads: choose a path outside it")
    existing = _nearest_existing(output)
    if not existing.is_dir():
        raise CheckpointError(f"{existing} is not a directory, so {output} cannot be created: choose another path")
    if not os.access(existing, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
        raise CheckpointError(f"{existing} cannot be written (read-only or not yours), so {output} cannot be "
                              "created there: choose a writable directory")


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def output_write_error(output: Path, command: str, error: OSError) -> CheckpointError:
    """A ``CheckpointError`` for ``error``, raised while ``command`` wrote ``output``, naming the fix."""
    reason = error.strerror or str(error)
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        fix = "free space (or raise the quota or file size limit) and run it again"
    elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "choose a writable directory"
    else:
        fix = "fix the cause and run it again"
    return CheckpointError(f"{command} could not write {output} ({reason}); nothing was left there: {fix}")


@contextlib.contextmanager
def written_whole(output: Path, command: str) -> Iterator[Path]:
    """Yield a hidden directory beside ``output`` to write into; renamed to ``output`` when the block ends.

    ``output`` must be missing or an empty directory. When the block raises, the hidden
    directory is removed and ``output`` is as it was; an ``OSError`` (a full disk, a
    read-only file system) becomes a ``CheckpointError`` naming the fix.
    """
    output = output.absolute()
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        temporary = output.parent / f"{layout.TEMP_PREFIX}{output.name}-{layout.new_token()}"
        temporary.mkdir()
    except OSError as error:
        raise output_write_error(output, command, error) from None
    try:
        yield temporary
        layout.fsync_dir(temporary)
        os.replace(temporary, output)  # an empty directory at ``output`` is replaced, a non-empty one refused
        layout.fsync_dir(output.parent)
    except OSError as error:
        shutil.rmtree(temporary, ignore_errors=True)
        raise output_write_error(output, command, error) from None
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
