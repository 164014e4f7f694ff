"""The one way drivetrain and its plugins read a ``torch.save`` file: without running code.

``torch.load(weights_only=True)`` rebuilds tensors, containers and numbers only; any other
class a pickle names must be on an explicit allow-list that the reader passes (the plain
data classes its writer is known to store). A file that names anything else, or is not a
readable pickle at all, is a :class:`CheckpointError` naming the file: nothing in it runs.
Plugins reach this through ``drivetrain.plugin_api.safe_torch_load`` and never call
``torch.load`` themselves.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Iterable, Union

import torch

from ...kernel.errors import CheckpointError
from .paths import regular_file

MapLocation = Union[str, torch.device, Callable[..., Any], dict, None]

_COLOUR = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# how torch names what its weights-only unpickler refused: "Unsupported global: GLOBAL mod.Name", "... class mod.Name"
_REFUSED_GLOBAL = re.compile(r"GLOBAL\s+([A-Za-z_][\w.]*)")
_TORCH_ADVICE = ("weights_only", "Weights only", "trusted source", "documentation of torch.load")


def _refusal(path: str | os.PathLike, error: Exception) -> CheckpointError:
    """One line of our own for a file the safe reader refused: what was refused and that the
    file is not loaded for safety. torch's own text is left out: it advises turning the
    safety off (``weights_only=False``), which would run whatever the file holds."""
    text = _COLOUR.sub("", str(error))
    refused = _REFUSED_GLOBAL.search(text)
    if refused is not None:
        return CheckpointError(f"{path} cannot be read safely and is not loaded, for safety: its pickle names "
                               f"{refused.group(1)}, which is neither a tensor nor plain data and could run code when "
                               "rebuilt; save that object's state as plain data (tensors, numbers, strings, lists, dicts)")
    first = next((line.strip() for line in text.splitlines()
                  if line.strip() and not any(advice in line for advice in _TORCH_ADVICE)),
                 "its pickle holds something other than tensors and plain data")
    return CheckpointError(f"{path} cannot be read safely ({type(error).__name__}: {first[:200]}); only tensors and "
                           "plain data are accepted: it is damaged or was not written by this library")


def safe_torch_load(path: str | os.PathLike, allowed: Iterable[Any] = (), map_location: MapLocation = "cpu",
                    mmap: bool = False) -> Any:
    """Read a ``torch.save`` file that may hold only tensors, plain data and the ``allowed`` classes.

    ``allowed`` are classes (or functions) the pickle may name, e.g. a library's own small
    data classes; each must be safe to rebuild from plain data. With ``mmap`` the tensors
    stay in the file (memory-mapped) until touched; a file in torch's old, non-zip format is
    then read whole. Raises ``CheckpointError`` for a missing, damaged or unsafe file.
    """
    if isinstance(path, (str, os.PathLike)):
        regular_file(path)
    try:
        with torch.serialization.safe_globals(list(allowed)):
            if mmap:
                try:
                    return torch.load(path, map_location=map_location, weights_only=True, mmap=True)
                except RuntimeError as error:
                    if "mmap" not in str(error):
                        raise
            return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing from the checkpoint") from None
    except Exception as error:  # weights_only refuses anything that would run code
        raise _refusal(path, error) from None
