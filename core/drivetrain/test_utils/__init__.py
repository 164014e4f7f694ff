"""``accelerate.test_utils``: helpers for tests and for the test mode of example scripts.

:mod:`.training` has small local datasets and models (``RegressionDataset``,
``RegressionModel``, ``mocked_dataloaders``); :mod:`.testing` the skip decorators, launch
commands and subprocess helpers. Importing this package imports neither until a name is used.
"""

from __future__ import annotations

from typing import Any

_TRAINING = ("RegressionDataset", "RegressionModel", "mocked_dataloaders",
             "mocked_dataloaders_for_autoregressive_models")


def __getattr__(name: str) -> Any:
    import importlib

    if name in ("testing", "training"):
        return importlib.import_module(f"{__name__}.{name}")
    if name.startswith("__"):
        raise AttributeError(name)
    module = importlib.import_module(f"{__name__}.{'training' if name in _TRAINING else 'testing'}")
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
