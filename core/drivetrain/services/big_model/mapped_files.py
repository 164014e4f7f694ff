"""Weight files mapped into memory once, and tensors that are views of them.

A file is mapped whole, privately (copy-on-write: nothing written to a view reaches the
file) and without keeping a file descriptor, the first time one of its weights is asked
for; each weight is then a view of the mapping, so reading it copies nothing. The mapping
costs address space only: the pages of a view count in the process's memory once they are
touched, and :func:`drop_pages` gives them back to the page cache when the weight is no
longer needed, so a model read from disk at every forward keeps only the weights in use
resident.

The kernel's page advice (``madvise``) is asked through ctypes so the calls release the
interpreter lock while the kernel reads (the background reader runs beside the model's
forward); where it is missing, pages are touched instead and never dropped, which is
correct but keeps what was read resident.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from typing import Iterable

import torch

from ...kernel.errors import CheckpointError

__all__ = ["MappedFiles", "read_ahead_pages", "drop_pages"]

_WILLNEED = getattr(mmap, "MADV_WILLNEED", None)
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


def _libc_function(name: str, argtypes: list):
    """``name`` of the C library this process already loaded (``CDLL(None)``: no search of
    the system's libraries, which would start ``ldconfig`` at import), or ``None``."""
    if _DONTNEED is None:
        return None
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function


_madvise = _libc_function("madvise", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int])
_mincore = _libc_function("mincore", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p])


def _inner_pages(tensor: torch.Tensor) -> tuple[int, int]:
    """Start and length of the whole pages inside ``tensor``'s bytes: advice never reaches
    a page it shares with a neighbour, which may be in use."""
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    last = end // mmap.PAGESIZE * mmap.PAGESIZE
    return first, max(last - first, 0)


def read_ahead_pages(tensor: torch.Tensor) -> None:
    """Ask the kernel to start reading ``tensor``'s pages from disk now (it returns at once;
    the read goes on in the background), so that the forward that uses it later finds them
    in the page cache. Pages already cached cost nothing."""
    if _madvise is None or _WILLNEED is None:
        return
    start, length = _inner_pages(tensor)
    if length and not _ends_cached(start, length):
        _madvise(start, length, _WILLNEED)


def _ends_cached(start: int, length: int) -> bool:
    """Whether the first and the last page of a range are in the page cache: asking the
    kernel to read ahead a range it holds already costs a lookup per page, and a model
    that fits in memory is held whole after its first forward."""
    if _mincore is None:
        return False
    answer = ctypes.create_string_buffer(1)
    for page in (start, start + length - mmap.PAGESIZE):
        if _mincore(page, mmap.PAGESIZE, answer) != 0 or not answer.raw[0] & 1:
            return False
    return True


def drop_pages(tensor: torch.Tensor) -> None:
    """Take the whole pages of ``tensor`` out of this process's memory; the next read faults
    them back from the file. Only for views :class:`MappedFiles` made: on other memory it
    would lose data."""
    if _madvise is None:
        return
    start, length = _inner_pages(tensor)
    if length:
        _madvise(start, length, _DONTNEED)


class MappedFiles:
    """Files mapped once each; :meth:`view` gives a weight as a view of its file's mapping."""

    def __init__(self) -> None:
        self._maps: dict[str, tuple[torch.Tensor, int, int]] = {}  # path -> (bytes, inode, size)
        self._bases: dict[int, str] = {}  # a mapping's address -> its file
        self._lock = threading.Lock()  # the background reader and the forward may map at once

    def _mapping(self, path: str) -> torch.Tensor:
        known = self._maps.get(path)
        if known is not None:
            return known[0]
        with self._lock:
            known = self._maps.get(path)
            if known is not None:
                return known[0]
            try:
                stat = os.stat(path)
                whole = torch.from_file(path, shared=False, size=stat.st_size, dtype=torch.uint8) if stat.st_size \
                    else torch.empty(0, dtype=torch.uint8)
            except (OSError, RuntimeError) as error:
                raise CheckpointError(f"cannot map {path} ({error}); the weights file is missing or unreadable: "
                                      "load the checkpoint again") from None
            self._maps[path] = (whole, stat.st_ino, stat.st_size)
            if stat.st_size:
                self._bases[whole.untyped_storage().data_ptr()] = path
            return whole

    def check_unchanged(self, paths: Iterable[str]) -> None:
        """Raise :class:`CheckpointError` if a mapped file was cut short in place: reading the
        lost part of a mapping would kill the process (SIGBUS). A file replaced by another
        (a new inode) is fine: the mapping keeps the old one."""
        for path in paths:
            known = self._maps.get(path)
            if known is None:
                continue
            try:
                stat = os.stat(path)
            except OSError:
                continue  # removed: the mapping keeps the data alive
            if stat.st_ino == known[1] and stat.st_size < known[2]:
                raise CheckpointError(f"{path} was cut short ({stat.st_size} of {known[2]} bytes) while the model "
                                      "was reading from it: load the checkpoint again")

    def view(self, path: str | os.PathLike, offset: int, dtype: torch.dtype, shape: Iterable[int]) -> torch.Tensor:
        """The tensor at byte ``offset`` of ``path``, sharing the mapping's memory (a copy only
        when the offset is not aligned to the element size)."""
        path = os.fspath(path)
        shape = [int(n) for n in shape]
        element = torch.empty(0, dtype=dtype).element_size()
        count = 1
        for n in shape:
            count *= n
        nbytes = count * element
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        whole = self._mapping(path)
        if offset < 0 or offset + nbytes > whole.numel():
            raise CheckpointError(f"cannot read {nbytes} bytes at {offset} of {path}: the file has {whole.numel()}; "
                                  "it is cut short or was replaced: load the checkpoint again")
        raw = whole[offset:offset + nbytes]
        if offset % element:
            raw = raw.clone()
        return raw.view(dtype).view(shape)

    def owns(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is a view of one of these mappings (pages that may be dropped)."""
        return tensor.device.type == "cpu" and tensor.untyped_storage().data_ptr() in self._bases

    def path_of(self, tensor: torch.Tensor) -> str | None:
        """The file ``tensor`` is a view of (``None`` for other tensors)."""
        return self._bases.get(tensor.untyped_storage().data_ptr()) if tensor.device.type == "cpu" else None

    def paths(self) -> list[str]:
        return list(self._maps)
