"""Accelerate's module functions for the state of a registered object, one file per object."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

logger = logging.getLogger("drivetrain.checkpointing.custom_state")  # its name before the layers, kept for log filters


def custom_state_path(path: str | os.PathLike, index: int) -> Path:
    return Path(path) / f"custom_checkpoint_{index}.pkl"


def save_custom_state(obj: Any, path: str | os.PathLike, index: int = 0, save_on_each_node: bool = False) -> None:
    """Write ``obj.state_dict()`` to ``path/custom_checkpoint_<index>.pkl`` from the main process
    (each node's with ``save_on_each_node``)."""
    from ..other import save

    target = custom_state_path(path, index)
    logger.info("saving the state of %s to %s", type(obj).__name__, target)
    save(obj.state_dict(), target, save_on_each_node=save_on_each_node)


def load_custom_state(obj: Any, path: str | os.PathLike, index: int = 0) -> None:
    """Give ``obj.load_state_dict`` what :func:`save_custom_state` wrote (read with
    ``weights_only=True``: plain containers and tensors, no code)."""
    source = custom_state_path(path, index)
    logger.info("loading the state of %s from %s", type(obj).__name__, source)
    from .safe_load import safe_torch_load

    obj.load_state_dict(safe_torch_load(source))
