"""What a model says about its own tensor-parallel layout."""

from __future__ import annotations

from typing import Any


def get_model_tp_size(model: Any) -> int | None:
    """The tensor-parallel degree a model was loaded with, or ``None`` when it was not split.

    transformers before 5 records it on the model (``model.tp_size``); transformers 5 leaves that
    attribute as ``None`` and keeps the degree in ``config.distributed_config`` (an object, or a
    plain dict once the config went through JSON).
    """
    size = getattr(model, "tp_size", None)
    if size is not None:
        return int(size)
    distributed = getattr(getattr(model, "config", None), "distributed_config", None)
    if isinstance(distributed, dict):
        size = distributed.get("tp_size")
    elif distributed is not None:
        size = getattr(distributed, "tp_size", None)
    return None if size is None else int(size)
