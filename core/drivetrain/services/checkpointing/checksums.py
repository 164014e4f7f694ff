"""Checksums of checkpoint files: recorded in the manifest when saving, verified when loading.

The hash is XXH3-128 (``xxhash``): about 8 GB/s on one core, so hashing the bytes as they
are written or read costs a small fraction of the I/O itself. Files the core writes are
hashed while they are written and files it reads while they are read; files written or
read by a plugin (sharded or engine checkpoints) are hashed in a pass of their own.

A checkpoint of manifest format 2 has no checksums: it still loads, unverified, with a
warning (``layout.read_manifest`` refuses a manifest that only claims an older format).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping

from ...kernel.errors import CheckpointError

ALGORITHM = "xxh3_128"
_CHUNK = 8 * 2**20


def new_hasher() -> Any:
    import xxhash

    return xxhash.xxh3_128()


def bytes_digest(data: bytes | memoryview) -> str:
    hasher = new_hasher()
    hasher.update(data)
    return hasher.hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    """The checksum of a whole file, read in chunks into one reused buffer."""
    hasher, buffer = new_hasher(), bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            hasher.update(view[:count])
    return hasher.hexdigest()


class Recorder:
    """Collects the checksums that writers compute while writing, by absolute path."""

    def __init__(self) -> None:
        self._digests: dict[str, str] = {}

    def record(self, path: str | os.PathLike, digest: str) -> None:
        self._digests[os.path.abspath(path)] = digest  # one dict store: safe from several threads

    def get(self, path: str | os.PathLike) -> str | None:
        return self._digests.get(os.path.abspath(path))


def mismatch(path: str | os.PathLike) -> CheckpointError:
    return CheckpointError(f"{path} does not match the checksum its manifest recorded: the file is damaged or was "
                           "changed after saving; load an earlier checkpoint")


class Verifier:
    """The checksums a checkpoint's manifest recorded, and which of its files were verified."""

    def __init__(self, directory: Path, checksums: Mapping[str, str] | None) -> None:
        self.directory = Path(directory)
        self.enabled = checksums is not None
        self._expected = {os.path.abspath(self.directory / name): digest for name, digest in (checksums or {}).items()}
        self._verified: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def for_manifest(cls, directory: Path, manifest: Mapping[str, Any]) -> Verifier:
        checksums = manifest.get("checksums")
        if checksums is None:
            if manifest.get("format_version", 0) >= 3:
                raise CheckpointError(f"{directory}/manifest.json has no checksums; the manifest is damaged")
            return cls(directory, None)  # layout.read_manifest warned that it loads unverified
        algorithm = manifest.get("checksum_algorithm")
        if algorithm != ALGORITHM or not isinstance(checksums, dict):
            raise CheckpointError(f"{directory} records checksums of kind {algorithm!r}; this drivetrain verifies "
                                  f"{ALGORITHM}: upgrade drivetrain")
        return cls(directory, checksums)

    def expected(self, path: str | os.PathLike) -> str | None:
        """The recorded checksum of ``path``, or ``None`` when nothing is to be verified."""
        return self._expected.get(os.path.abspath(path))

    def check(self, path: str | os.PathLike, digest: str) -> None:
        key = os.path.abspath(path)
        wanted = self._expected.get(key)
        if wanted is None:
            return
        if digest != wanted:
            raise mismatch(path)
        with self._lock:
            self._verified.add(key)

    def verify_file(self, path: str | os.PathLike) -> None:
        if self.expected(path) is not None:
            self.check(path, file_digest(path))

    def unverified(self) -> list[str]:
        with self._lock:
            return sorted(set(self._expected) - self._verified)

    def share_of_rest(self, rank: int, world: int) -> Iterable[str]:
        """The files not yet verified that this process verifies: every ``world``-th of all listed files.

        Each process verifies what it read itself; the files only plugins read are split
        across processes so each is hashed once (a failure anywhere fails every process).
        """
        ordered = sorted(self._expected)
        mine = {path for index, path in enumerate(ordered) if index % max(world, 1) == rank}
        return [path for path in self.unverified() if path in mine]
