"""Making a written checkpoint durable and visible: inside ``save_state``, or beside training.

Writing a checkpoint's files only fills the page cache: memory work, as fast as a plain
``torch.save``. Making them durable (fsync) goes at the disk's speed, often slower than
the writing itself. By default the commit runs before ``save_state`` returns, so the
checkpoint is in place as Accelerate's callers expect; with background commits on,
``save_state`` returns once every process has written its files and a commit on each
process finishes the job in a thread:

* every process fsyncs the files it wrote and the directories holding them, then leaves a
  marker ``.synced-<rank>`` in the temporary directory (``.failed-<rank>`` with the error);
* the publishing process waits for the markers of the processes it publishes for, then
  writes the manifest, syncs it, renames the directory into place, rotates old
  checkpoints and calls ``on_published``.

A checkpoint for object storage (``CommitPlan.upload``, ``remote.py``) is committed by the
store instead: each process uploads its own files and leaves its marker there; the
publisher, once every marker is there, uploads the manifest last and rotates the store.

The wait for markers is a wait on peers, so the run's collective timeout bounds it: a rank
that was stopped or hangs fails the commit with a line naming it, never a job that waits
for half an hour. A commit that fails after the script has ended makes the process exit 1,
so that its launcher ends the job instead of reporting success.

A crash before the rename leaves only a hidden temporary directory: the previous
checkpoint is intact and nothing half-written is ever visible. The thread is not a daemon,
so a script that ends right after ``save_state`` still finishes its checkpoint; everything
that reads checkpoints waits for the commit first (see ``run_state.finish_commit``).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import shutil
import threading
import time
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...kernel.errors import CheckpointError
from . import layout, leftovers, target

logger = logging.getLogger("drivetrain.checkpointing.commit")  # its name before the layers, kept for log filters
SYNCED_MARKER = ".synced-{rank}"
FAILED_MARKER = ".failed-{rank}"


@dataclass
class Publication:
    """What the publishing process does once every process's files are durable."""

    manifest: dict[str, Any]
    other_ranks: list[int]
    keep: int | None = None  # rotate the checkpoints beside it down to this many
    on_published: Callable[[Path | str], None] | None = None
    timeout: float = 1800.0  # the run's collective timeout, unless DRIVETRAIN_CHECKPOINT_COMMIT_TIMEOUT is set
    # A non-blocking save: the manifest's files and checksums come from each process's marker
    # (and the publisher's own writing), not from a gather before the commit.
    files_from_markers: bool = False


@dataclass
class CommitPlan:
    temporary: Path
    final: Path
    rank: int
    files: list[str]  # relative to ``temporary``, written by this process
    fsync: bool
    publication: Publication | None = None
    # A non-blocking save: writes this process's files first (returns their names) and
    # fills ``digests``; the commit then goes on as for a blocking save.
    write: Callable[[], list[str]] | None = None
    digests: dict[str, str] = field(default_factory=dict)
    # Commits through object storage instead of the local disk (``remote.Upload``): called
    # with this plan, returns the checkpoint's URL on the publisher (``None`` elsewhere).
    upload: Callable[[CommitPlan], str | None] | None = None


def _fsync_path(path: Path, directory: bool = False) -> None:
    descriptor = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(descriptor)
    except OSError:
        if not directory:  # some file systems cannot sync directories; files must sync
            raise
    finally:
        os.close(descriptor)


def sync_files(temporary: Path, files: list[str]) -> None:
    """fsync each file and each directory under ``temporary`` that holds one."""
    directories = {temporary}
    for name in files:
        path = temporary / name
        _fsync_path(path)
        parent = path.parent
        while parent != temporary and parent not in directories:
            directories.add(parent)
            parent = parent.parent
    for directory in sorted(directories, key=lambda p: len(p.parts), reverse=True):
        _fsync_path(directory, directory=True)


def _write_marker(path: Path, text: str) -> None:
    # The temporary directory may be gone already (the publisher gave up): nothing to tell then.
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError:
        pass


def wait_for_markers(temporary: Path, ranks: list[int], timeout: float) -> dict[int, str]:
    """Wait until every rank in ``ranks`` has synced its files; a failure or timeout raises.
    Returns what each rank's marker says."""
    deadline = time.monotonic() + timeout
    waiting, pause = set(ranks), 0.002
    said: dict[int, str] = {}
    while waiting:
        for rank in sorted(waiting):
            failed = temporary / FAILED_MARKER.format(rank=rank)
            if failed.exists():
                reason = failed.read_text(encoding="utf-8", errors="replace").strip()
                raise CheckpointError(f"process {rank} could not sync its files ({reason})")
            synced = temporary / SYNCED_MARKER.format(rank=rank)
            if synced.exists():
                said[rank] = synced.read_text(encoding="utf-8")
                waiting.discard(rank)
        if waiting:
            if time.monotonic() > deadline:
                silent = sorted(waiting)
                who = ("rank " if len(silent) == 1 else "ranks ") + ", ".join(map(str, silent))
                raise CheckpointError(
                    f"{who} did not answer: {'its' if len(silent) == 1 else 'their'} files were not synced "
                    f"within {timeout:g} s (the run's collective timeout); look at {who} (stopped, hung or "
                    "crashed), or raise the timeout (InitProcessGroupKwargs(timeout=...), `drivetrain launch "
                    "--timeout`, or DRIVETRAIN_CHECKPOINT_COMMIT_TIMEOUT for slow disks)")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
    return said


def run_commit(plan: CommitPlan) -> None:
    """Sync this process's files; on the publisher, publish the checkpoint once all are synced.

    A plan with ``write`` (a non-blocking save) writes this process's files first; a failure
    there is told to the publisher through this process's failure marker (on the store for
    an upload)."""
    if plan.write is not None:
        try:
            plan.files = plan.write()
        except BaseException as error:
            text = str(error) if isinstance(error, CheckpointError) else f"{type(error).__name__}: {error}"
            if plan.upload is not None:
                plan.upload.fail(plan, f"writing failed: {text}")
            elif plan.publication is None:
                _write_marker(plan.temporary / FAILED_MARKER.format(rank=plan.rank), f"writing failed: {text}")
            else:
                shutil.rmtree(plan.temporary, ignore_errors=True)
            raise
    if plan.upload is not None:
        published = plan.upload(plan)
        if published is not None and plan.publication is not None and plan.publication.on_published is not None:
            plan.publication.on_published(published)
        return
    if plan.publication is None:
        _sync_and_mark(plan)
        return
    try:
        _sync_and_publish(plan, plan.publication)
    except BaseException:
        shutil.rmtree(plan.temporary, ignore_errors=True)  # never published: nothing of it may stay
        raise
    if plan.publication.keep is not None:
        try:
            layout.rotate(plan.final.parent, plan.publication.keep, newest=plan.final)
        except OSError as error:  # the new checkpoint is in place; an old one merely stays
            logger.warning("could not delete old checkpoints beside %s: %s", plan.final, error)
    if plan.publication.on_published is not None:
        plan.publication.on_published(plan.final)


def _sync_own_files(plan: CommitPlan) -> None:
    try:
        sync_files(plan.temporary, plan.files)
    except OSError as error:
        raise CheckpointError(f"syncing the files of {plan.final} failed: {error}") from None


def _sync_and_mark(plan: CommitPlan) -> None:
    if not plan.fsync and plan.write is None:
        return  # the publisher learnt from the save's gather that every file is written
    try:
        if plan.fsync:
            _sync_own_files(plan)
    except CheckpointError as error:
        _write_marker(plan.temporary / FAILED_MARKER.format(rank=plan.rank), str(error))
        raise
    # A non-blocking save's marker carries this process's files and checksums for the manifest.
    _write_marker(plan.temporary / SYNCED_MARKER.format(rank=plan.rank), marker_text(plan))


def _sync_and_publish(plan: CommitPlan, publication: Publication) -> None:
    manifest = publication.manifest
    if plan.fsync or publication.files_from_markers:
        if plan.fsync:
            _sync_own_files(plan)
        said = wait_for_markers(plan.temporary, publication.other_ranks, publication.timeout)
        for rank in publication.other_ranks:
            (plan.temporary / SYNCED_MARKER.format(rank=rank)).unlink(missing_ok=True)
        if publication.files_from_markers:
            manifest = manifest_from_markers(publication, plan.digests, said)
    leftovers.forget_writer(plan.temporary)  # it becomes the checkpoint: no longer a leftover to tell about
    # Every file there, plugins' own included: what a later save may replace as this checkpoint.
    contents, _other = target.files_under(plan.temporary)
    layout.write_manifest(plan.temporary, dict(manifest, contents=sorted(contents)), plan.fsync)
    target.publish(plan.temporary, plan.final, plan.fsync)


def marker_text(plan: CommitPlan) -> str:
    """What this process's ``.synced-<rank>`` marker says: its files and checksums for a
    non-blocking save's manifest, nothing otherwise (the save's gather told the publisher)."""
    return json.dumps(plan.digests) if plan.write is not None else ""


def manifest_from_markers(publication: Publication, own: dict[str, str], said: dict[int, str]) -> dict[str, Any]:
    """A non-blocking save's manifest: the publisher's files and those each marker lists."""
    digests = dict(own)
    for rank in publication.other_ranks:
        digests.update(_marker_digests(said.get(rank, ""), rank))
    return dict(publication.manifest, files=sorted(digests), checksums=dict(sorted(digests.items())))


def _marker_digests(text: str, rank: int) -> dict[str, str]:
    try:
        digests = json.loads(text)
    except ValueError:
        digests = None
    if not isinstance(digests, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in digests.items()):
        raise CheckpointError(f"process {rank}'s marker does not list its files; save again")
    return digests


class PendingCommit:
    """A commit running in its own thread (or already run, when started with ``background=False``)."""

    def __init__(self, plan: CommitPlan, background: bool) -> None:
        self.final = plan.final
        self.error: str | None = None
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, args=(plan,), name="drivetrain-checkpoint-commit")
            self._thread.start()
        else:
            self._run(plan)

    def _run(self, plan: CommitPlan) -> None:
        try:
            run_commit(plan)
        except Exception as error:  # kept for the next collective wait, which raises it on every process
            self.error = str(error) if isinstance(error, CheckpointError) else f"{type(error).__name__}: {error}"
            logger.error("checkpoint %s was not completed: %s", plan.final, self.error)

    def wait(self) -> str | None:
        """Wait for the commit; returns its error, or ``None`` when it succeeded."""
        if self._thread is not None:
            # no timeout of its own: the thread's one wait on peers (wait_for_markers) is bounded
            self._thread.join()
        return self.error


# This process's last commit, until a collective wait takes it. Kept per process rather than
# per Accelerator: a second Accelerator in the same script must also see the checkpoint.
_pending: PendingCommit | None = None


def start(plan: CommitPlan, background: bool) -> None:
    global _pending, _exit_check_registered
    if not _exit_check_registered:
        atexit.register(_fail_exit_if_uncollected)
        _exit_check_registered = True
    _pending = PendingCommit(plan, background)


_exit_check_registered = False


def _fail_exit_if_uncollected() -> None:
    """At exit (the commit thread already joined): a failure nobody collected ends the process with 1.

    The error was logged when it happened; a clean exit code would tell the launcher that this
    rank finished, and it would keep waiting for a peer that may never answer.
    """
    if _pending is not None and _pending.error is not None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os._exit(1)


def pending() -> PendingCommit | None:
    return _pending


def take_pending() -> PendingCommit | None:
    global _pending
    taken, _pending = _pending, None
    return taken
