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
from typing import Any, Callable, Iterable, Union

import torch

from ...kernel.errors import CheckpointError

MapLocation = Union[str, torch.device, Callable[..., Any], dict, None]


def safe_torch_load(path: str | os.PathLike, allowed: Iterable[Any] = (), map_location: MapLocation = "cpu",
                    mmap: bool = False) -> Any:
    """Read a ``torch.save`` file that may hold only tensors, plain data and the ``allowed`` classes.

    ``allowed`` are classes (or functions) the pickle may name, e.g. a library's own small
    data classes; each must be safe to rebuild from plain data. With ``mmap`` the tensors
    stay in the file (memory-mapped) until touched; a file in torch's old, non-zip format is
    then read whole. Raises ``CheckpointError`` for a missing, damaged or unsafe file.
    """
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
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CheckpointError(f"{path} cannot be read safely ({type(error).__name__}: {first[:300]}); only tensors and "
                              "plain data are accepted: it is damaged or was not written by this library") from None
