"""``is_msamp_available``."""

from __future__ import annotations

import importlib.util


def is_msamp_available() -> bool:
    return importlib.util.find_spec("msamp") is not None
