"""``accelerate.test_utils``: helpers for tests and for the test mode of example scripts.

:mod:`.training` has small local datasets and models (``RegressionDataset``,
``RegressionModel``, ``mocked_dataloaders``); :mod:`.testing` the skip decorators, launch
commands and subprocess helpers. Importing this package imports neither until a name is used.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..kernel.contributed import surface_getattr

_TRAINING = ("RegressionDataset", "RegressionModel", "mocked_dataloaders",
             "mocked_dataloaders_for_autoregressive_models")


def _from_testing(name: str) -> Any:
    return getattr(importlib.import_module(f"{__name__}.testing"), name)


__getattr__ = surface_getattr(__name__, submodules=True, on_request=_from_testing,
                              lazy={name: f"{__name__}.training:{name}" for name in _TRAINING})
