"""Checkpoints at an fsspec URL (``s3://``, ``gs://``, ``file://``, ``memory://``, ...).

A layer around the local save and load, so local paths keep their speed and every
guarantee of the local code:

* **Saving** writes each process's files with the local code into a *staging* directory
  on its own machine, and the commit (``commit.py``, in ``save_state`` or in its
  background thread) uploads them, each process its own (see :class:`Upload`), and
  ``manifest.json`` last, from the publisher. Object stores have no rename, so
  the manifest is what makes a checkpoint exist: a prefix without one (an upload that was
  killed) is never loaded, never counted as the newest, and is deleted by the next save
  to that name and by every automatic save's commit. Rotation (``total_limit``) deletes an
  old checkpoint's manifest before its other files, so a crash while deleting leaves an
  incomplete checkpoint, never a damaged complete one.
* **Loading** downloads the checkpoint's files (those its manifest lists, the manifest
  last) into a local cache directory, where the local loader verifies every file against
  the manifest's checksums before anything is restored.

Credentials come the way the store's fsspec library reads them (``AWS_*`` variables,
``~/.aws``, instance roles), or from ``ProjectConfiguration(storage_options={...})``, passed
to the file system as keyword arguments (``endpoint_url``, ``key``, ``secret``, ...).
``DRIVETRAIN_CHECKPOINT_STAGING_DIR`` chooses where staging and cache directories go
(default: ``$XDG_CACHE_HOME/drivetrain/checkpoints``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...kernel.errors import CheckpointError
from . import checksums, commit, layout, peers

if TYPE_CHECKING:  # pragma: no cover
    from ...runtime.session import Session

logger = logging.getLogger("drivetrain.checkpointing.remote")

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
# The pip extra that brings a protocol's fsspec implementation, where drivetrain has one.
_EXTRAS = {"s3": "s3", "s3a": "s3"}
STAGING_VARIABLE = "DRIVETRAIN_CHECKPOINT_STAGING_DIR"


def is_url(path: Any) -> bool:
    """Whether ``path`` names a place in an fsspec file system rather than a local path."""
    return isinstance(path, str) and _URL.match(path) is not None


def join(url: str, *names: str) -> str:
    return "/".join([url.rstrip("/"), *names])


def _base_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def staging_base() -> Path:
    own = os.environ.get(STAGING_VARIABLE)
    if own:
        return Path(own).expanduser().absolute()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache).absolute() / "drivetrain" / "checkpoints"


def _digest(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()[:16]


# ------------------------------------------------------------------ the store


@dataclass
class Store:
    """An fsspec file system and the URL of a checkpoint (or of a folder of checkpoints) in it."""

    url: str
    fs: Any
    path: str  # ``url`` as the file system names it (protocol stripped)

    def child(self, *names: str) -> str:
        return "/".join([self.path.rstrip("/"), *names])

    def refresh(self, path: str | None = None) -> None:
        # Listings are cached by some file systems (s3fs): another process may have written since.
        self.fs.invalidate_cache(path or self.path)


def open_store(url: str, storage_options: dict[str, Any] | None = None) -> Store:
    """The file system of ``url``; a :class:`CheckpointError` naming what to install when its
    library is missing (raised before anything is written)."""
    protocol = _URL.match(url).group(1).lower()  # type: ignore[union-attr]
    try:
        import fsspec
    except ImportError:
        extra = _EXTRAS.get(protocol, "remote")
        raise CheckpointError(f"checkpoints at {url} need fsspec: pip install 'drivetrain[{extra}]'") from None
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except ImportError as error:
        extra = _EXTRAS.get(protocol)
        fix = f"pip install 'drivetrain[{extra}]'" if extra else f"install fsspec's library for {protocol}:// ({error})"
        raise CheckpointError(f"checkpoints at {url} need the {protocol}:// file system, which is not installed: "
                              f"{fix}") from None
    except ValueError:
        raise CheckpointError(f"{url}: fsspec knows no {protocol}:// file system; use a local path or a URL of a "
                              "store fsspec supports (s3://, gs://, az://, file://, ...)") from None
    options = dict(storage_options or {})
    try:
        fs = fsspec.filesystem(protocol, **options)
    except TypeError as error:
        raise CheckpointError(f"ProjectConfiguration(storage_options={sorted(options)}) is not what the {protocol}:// "
                              f"file system ({cls.__name__}) takes: {error}") from None
    return Store(url=url.rstrip("/"), fs=fs, path=cls._strip_protocol(url).rstrip("/"))


def _storage_options(session: Session) -> dict[str, Any] | None:
    return getattr(session.project_configuration, "storage_options", None)


def _numbered_folders(store: Store) -> dict[int, str]:
    """The ``checkpoint_N`` folders under ``store``, complete or not, by number."""
    store.refresh()
    found = {}
    try:
        children = store.fs.ls(store.path, detail=False)
    except FileNotFoundError:
        return {}
    for child in children:
        match = layout.AUTOMATIC_NAME.match(child.rstrip("/").rsplit("/", 1)[-1])
        if match:
            found[int(match.group(1))] = child.rstrip("/")
    return found


def automatic_checkpoints(store: Store) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """The complete ``checkpoint_N`` folders under ``store`` and the incomplete ones, oldest first."""
    complete, incomplete = [], []
    for number, path in sorted(_numbered_folders(store).items()):
        store.refresh(path)
        (complete if store.fs.exists(f"{path}/{layout.MANIFEST}") else incomplete).append((number, path))
    return complete, incomplete


def _delete(store: Store, path: str) -> None:
    """Delete a checkpoint's folder, manifest first: a crash part way leaves it incomplete, not damaged."""
    try:
        store.fs.rm_file(f"{path}/{layout.MANIFEST}")
    except FileNotFoundError:
        pass
    try:
        store.fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass
    store.refresh(path)


# ------------------------------------------------------------------- save


SYNCED_MARKER = ".synced-{rank}"
FAILED_MARKER = ".failed-{rank}"


@dataclass
class Upload:
    """Where one ``save_state`` goes and how its commit reaches the store (``CommitPlan.upload``).

    Every process stages its own files on its own machine and uploads them in its commit,
    then leaves ``.synced-<rank>`` in the checkpoint's folder on the store (``.failed-<rank>``
    with the error); the publisher uploads its files, waits for every marker (bounded by the
    commit's timeout, as a local commit waits for its peers), removes them, writes the
    manifest last, deletes files of the checkpoint it replaced, and tidies the store.
    """

    store: Store
    staging: Path
    automatic: bool  # a ``checkpoint_N`` under the project's ``checkpoints`` folder
    keep: int | None = None
    replaced: set[str] = field(default_factory=set)  # files of the checkpoint this one replaces

    def __call__(self, plan: Any) -> str | None:
        """This process's part of the commit of ``plan`` (a ``commit.CommitPlan``)."""
        if plan.publication is None:
            try:
                self._upload_own(plan)
            except Exception as error:
                self._mark(FAILED_MARKER.format(rank=plan.rank), f"{type(error).__name__}: {error}".encode())
                raise
            finally:
                for name in plan.files:  # only its own: processes of one machine share the folder
                    (plan.temporary / name).unlink(missing_ok=True)
            self._mark(SYNCED_MARKER.format(rank=plan.rank), commit.marker_text(plan).encode())
            return None
        try:
            self._upload_own(plan)
            said = self._wait_for_markers(plan.publication.other_ranks, plan.publication.timeout)
            if plan.publication.files_from_markers:  # a non-blocking save: the files come with the markers
                plan.publication.manifest = commit.manifest_from_markers(plan.publication, plan.digests, said)
            self._write_manifest(plan)
        finally:
            shutil.rmtree(plan.temporary, ignore_errors=True)  # every other process is done with it
            layout.remove_stale_temporaries(plan.temporary.parent)  # what killed saves left in staging
        if self.automatic:
            self._tidy_store()
        return self.store.url

    def _upload_own(self, plan: Any) -> None:
        try:
            _put(self.store, plan.temporary, sorted(plan.files))
        except OSError as error:
            raise CheckpointError(f"uploading the files of {self.store.url} failed: {error}") from None

    def _mark(self, name: str, text: bytes) -> None:
        try:
            self.store.fs.pipe_file(self.store.child(name), text)
        except OSError as error:  # the publisher then times out naming this process
            logger.warning("could not leave %s at %s: %s", name, self.store.url, error)

    def fail(self, plan: Any, reason: str) -> None:
        """This process could not write its files: the publisher hears it from its marker."""
        if plan.publication is None:
            self._mark(FAILED_MARKER.format(rank=plan.rank), reason.encode())
        else:
            shutil.rmtree(plan.temporary, ignore_errors=True)

    def _wait_for_markers(self, ranks: list[int], timeout: float) -> dict[int, str]:
        """Wait for every rank's marker on the store; returns what each says."""
        deadline = time.monotonic() + timeout
        waiting, pause = set(ranks), 0.01
        said: dict[int, str] = {}
        while waiting:
            self.store.refresh()
            for rank in sorted(waiting):
                failed = self.store.child(FAILED_MARKER.format(rank=rank))
                if self.store.fs.exists(failed):
                    reason = self.store.fs.cat_file(failed).decode("utf-8", "replace").strip()
                    raise CheckpointError(f"process {rank} could not upload its files ({reason})")
                synced = self.store.child(SYNCED_MARKER.format(rank=rank))
                if self.store.fs.exists(synced):
                    said[rank] = self.store.fs.cat_file(synced).decode("utf-8", "replace")
                    waiting.discard(rank)
            if waiting and time.monotonic() > deadline:
                who = ", ".join(map(str, sorted(waiting)))
                raise CheckpointError(f"rank(s) {who} did not upload their files to {self.store.url} within "
                                      f"{timeout:g} s (the run's collective timeout); look at those ranks, or raise "
                                      "the timeout (DRIVETRAIN_CHECKPOINT_COMMIT_TIMEOUT for slow uploads)")
            if waiting:
                time.sleep(pause)
                pause = min(pause * 2, 0.5)
        for rank in ranks:
            self.store.fs.rm_file(self.store.child(SYNCED_MARKER.format(rank=rank)))
        return said

    def _write_manifest(self, plan: Any) -> None:
        """Upload the manifest (every process's files are up: this is the commit), then drop
        the files of the checkpoint it replaced that it does not have."""
        publication = plan.publication
        names = list(publication.manifest["files"])
        own = set(plan.files)
        self.store.refresh()
        sizes = {}
        for name in names:
            try:
                sizes[name] = ((plan.temporary / name).stat().st_size if name in own
                               else self.store.fs.size(self.store.child(name)))
            except FileNotFoundError:
                raise CheckpointError(f"{name} was not uploaded to {self.store.url}; the save failed on some "
                                      "process") from None
        manifest = layout.finished_manifest(dict(publication.manifest, contents=sorted(names)), sizes)
        self.store.fs.pipe_file(self.store.child(layout.MANIFEST),
                                json.dumps(manifest, indent=1, sort_keys=True).encode())
        for name in sorted(self.replaced - set(names) - {layout.MANIFEST}):
            try:
                self.store.fs.rm_file(self.store.child(name))
            except FileNotFoundError:
                pass
        self.store.refresh()
        logger.info("uploaded checkpoint %s (%d files)", self.store.url, len(names) + 1)

    def _tidy_store(self) -> None:
        """Delete incomplete checkpoints left by killed saves and, with ``keep``, the oldest complete ones."""
        parent = Store(url=self.store.url.rsplit("/", 1)[0], fs=self.store.fs, path=self.store.path.rsplit("/", 1)[0])
        try:
            complete, incomplete = automatic_checkpoints(parent)
            for _number, path in incomplete:
                if path != self.store.path:
                    _delete(parent, path)
            if self.keep is not None:
                others = [path for _n, path in complete if path != self.store.path]
                for path in others[: max(len(others) - (max(self.keep, 1) - 1), 0)]:
                    _delete(parent, path)
        except OSError as error:  # the new checkpoint is in place; an old one merely stays
            logger.warning("could not delete old checkpoints beside %s: %s", self.store.url, error)


def plan_upload(session: Session, output_dir: str | os.PathLike | None) -> Upload | None:
    """The upload of a ``save_state`` to a URL, or ``None`` for a local one. Every process calls it.

    Checks the store (its library, an existing checkpoint of that automatic name) and empties
    the staging directory before anything is written. The main process makes the URL ready
    for uploads (before the save's first gather, so before any process uploads): an
    incomplete checkpoint of that automatic name is deleted, and a complete checkpoint
    being saved over loses its manifest, so no mix of its files and new ones is ever loaded.
    """
    config = session.project_configuration
    if config.automatic_checkpoint_naming:
        if not is_url(session.project_dir):
            return None
        if output_dir is not None:
            logger.warning("save_state(output_dir) is ignored with automatic_checkpoint_naming; saving under %s",
                           join(session.project_dir, "checkpoints"))
        url = join(session.project_dir, "checkpoints", f"checkpoint_{config.iteration}")
    elif is_url(output_dir):
        url = str(output_dir)
    else:
        return None
    if config.save_on_each_node and session.state.num_machines > 1:
        raise CheckpointError(f"save_on_each_node=True with a checkpoint URL ({url}) would have every machine upload "
                              "its own manifest there: set save_on_each_node=False to save to object storage")
    store = open_store(url, _storage_options(session))
    automatic = bool(config.automatic_checkpoint_naming)
    store.refresh()
    if automatic and store.fs.exists(store.child(layout.MANIFEST)):
        raise CheckpointError(f"checkpoint {url} already exists; set ProjectConfiguration(iteration=...) past it")
    staging = staging_base() / _digest(url.rsplit("/", 1)[0]) / _base_name(url)
    shutil.rmtree(staging, ignore_errors=True)  # a copy left by a killed save; no save is running here now
    staging.parent.mkdir(parents=True, exist_ok=True)
    replaced: set[str] = set()
    if session.is_main_process:
        replaced = _clear_for_upload(store, automatic)
    return Upload(store=store, staging=staging, automatic=automatic, keep=config.total_limit if automatic else None,
                  replaced=replaced)


def _clear_for_upload(store: Store, automatic: bool) -> set[str]:
    """Make ``store`` ready for a new checkpoint; returns the files of the one it replaces."""
    old = _remote_contents(store)
    if old is not None:
        store.fs.rm_file(store.child(layout.MANIFEST))  # from here it is not a checkpoint
    elif automatic and store.fs.exists(store.path):
        _delete(store, store.path)  # an incomplete checkpoint of ours: a killed save left it
    # otherwise the prefix may hold the user's files: they stay, ours are written beside them
    for name in store.fs.glob(store.child(".synced-*")) + store.fs.glob(store.child(".failed-*")):
        store.fs.rm_file(name)  # markers of an earlier, interrupted save
    store.refresh()
    return old or set()


def _put(store: Store, local: Path, names: list[str]) -> None:
    if not names:
        return
    store.fs.makedirs(store.path, exist_ok=True)  # a no-op on object stores; file:// needs the folder
    for parent in sorted({name.rsplit("/", 1)[0] for name in names if "/" in name}):
        store.fs.makedirs(store.child(parent), exist_ok=True)  # a no-op on object stores
    store.fs.put([str(local / name) for name in names], [store.child(name) for name in names])


def _remote_contents(store: Store) -> set[str] | None:
    """The files of the checkpoint at ``store`` (from its manifest), or ``None`` when there is none."""
    try:
        manifest = json.loads(store.fs.cat_file(store.child(layout.MANIFEST)))
    except (FileNotFoundError, ValueError):
        return None
    names = manifest.get("contents", manifest.get("files")) if isinstance(manifest, dict) else None
    if not isinstance(names, list):
        return None
    return {name for name in names if _safe_name(name)}


def _safe_name(name: Any) -> bool:
    """A file name read from a manifest (data) stays inside the checkpoint."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name or "\x00" in name:
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


# ------------------------------------------------------------------- load


def checkpoint_url(session: Session, input_dir: str | os.PathLike | None) -> str | None:
    """The URL ``load_state`` reads, or ``None`` when it reads a local path: ``input_dir``, or the
    newest complete ``checkpoint_N`` of a project in object storage."""
    if is_url(input_dir):
        return str(input_dir)
    if input_dir is not None or not session.project_configuration.automatic_checkpoint_naming:
        return None
    if not is_url(session.project_dir):
        return None
    root = join(session.project_dir, "checkpoints")
    complete, _incomplete = automatic_checkpoints(open_store(root, _storage_options(session)))
    if not complete:
        raise CheckpointError(f"no complete checkpoint under {root}; pass load_state() a directory, or start "
                              "without one")
    return join(root, complete[-1][1].rsplit("/", 1)[-1])


def fetch_for_load(session: Session, input_dir: str | os.PathLike | None) -> Path | None:
    """The local copy of the checkpoint ``load_state`` reads from object storage (downloaded by
    each machine's first process, into the cache), or ``None`` for a local one. Collective."""
    url = checkpoint_url(session, input_dir)
    if url is None:
        return None
    state = session.state
    local, error = None, None
    if session.local_process_index == 0:
        try:
            local = download_checkpoint(open_store(url, _storage_options(session)))
        except (CheckpointError, OSError) as exc:
            error = str(exc) if isinstance(exc, CheckpointError) else f"downloading {url} failed: {exc}"
    if session.num_processes == 1:
        if error:
            raise CheckpointError(error)
        _sources[local.absolute()] = url
        return local
    results = peers.gather(state, (str(local) if local else None, error), f"loading {url}")
    failures = [(rank, message) for rank, (_l, message) in enumerate(results) if message]
    if failures:
        rank, message = failures[0]
        raise CheckpointError(message if rank == session.process_index else
                              f"loading {url} failed on process {rank}: {message}")
    first_here = session.process_index - session.local_process_index
    local = Path(results[first_here][0])
    _sources[local.absolute()] = url
    return local


# Each local copy this process loaded, and the URL it came from (few: one per load).
_sources: dict[Path, str] = {}


def source_of(local: Path) -> str | None:
    """The URL the local copy ``local`` was downloaded from, or ``None`` for a local checkpoint."""
    return _sources.get(Path(local).absolute())


def download_checkpoint(store: Store) -> Path:
    """Download the checkpoint at ``store`` into the cache (once per manifest); its local path."""
    store.refresh()
    try:
        manifest_bytes = store.fs.cat_file(store.child(layout.MANIFEST))
    except FileNotFoundError:
        raise CheckpointError(f"{store.url} has no {layout.MANIFEST}: it is not a drivetrain checkpoint, or its save "
                              "never finished; load an earlier checkpoint") from None
    try:
        manifest = json.loads(manifest_bytes)
    except ValueError as error:
        raise CheckpointError(f"{store.url}/{layout.MANIFEST} is damaged ({error}); load an earlier checkpoint") from None
    names = manifest.get("contents", manifest.get("files")) if isinstance(manifest, dict) else None
    if not isinstance(names, list) or not all(_safe_name(name) for name in names):
        raise CheckpointError(f"{store.url}/{layout.MANIFEST} is damaged: its file list is not a list of names inside "
                              "the checkpoint; load an earlier checkpoint")
    # One copy per folder of checkpoints (a run's ``checkpoints``): loading checkpoint_5
    # replaces the cached checkpoint_4, so evaluating many checkpoints does not fill the disk.
    per_url = staging_base() / "downloads" / _digest(store.url.rsplit("/", 1)[0])
    final = per_url / _digest(store.url.encode() + manifest_bytes) / _base_name(store.url)
    if _whole_copy(final, manifest, manifest_bytes):
        return final  # downloaded before; the loader verifies every file against the manifest all the same
    temporary = per_url / f"{layout.TEMP_PREFIX}{layout.new_token()}" / _base_name(store.url)
    try:
        wanted = sorted(set(names) - {layout.MANIFEST})
        for parent in {(temporary / name).parent for name in wanted} | {temporary}:
            parent.mkdir(parents=True, exist_ok=True)
        if wanted:
            store.fs.get([store.child(name) for name in wanted], [str(temporary / name) for name in wanted])
        (temporary / layout.MANIFEST).write_bytes(manifest_bytes)  # the one read above, not a newer one
        for old in per_url.iterdir():  # other checkpoints of the folder: only the newest download is kept
            # (not this version: another machine sharing the cache may have just put it in place)
            if not old.name.startswith(layout.TEMP_PREFIX) and old != final.parent:
                shutil.rmtree(old, ignore_errors=True)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(temporary, final)
        except OSError:
            if not (final / layout.MANIFEST).is_file():  # not another process's identical copy
                raise
    except FileNotFoundError as error:
        raise CheckpointError(f"{store.url} lists a file the store does not hold ({error.filename or error}); the "
                              "checkpoint is damaged: load an earlier one") from None
    finally:
        shutil.rmtree(temporary.parent, ignore_errors=True)
    return final


def _whole_copy(local: Path, manifest: dict[str, Any], manifest_bytes: bytes) -> bool:
    """Whether ``local`` is an intact download of the checkpoint with this manifest: every
    file matches its checksum (a copy damaged on this disk is downloaded again, not reused)."""
    try:
        if (local / layout.MANIFEST).read_bytes() != manifest_bytes:
            return False
        recorded = manifest.get("checksums")
        if not isinstance(recorded, dict) or set(recorded) != set(manifest.get("files", ())):
            return False  # written before checksums: nothing to tell a whole copy by
        return all(checksums.file_digest(local / name) == digest for name, digest in recorded.items()
                   if _safe_name(name))
    except OSError:
        return False
