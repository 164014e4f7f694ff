"""drivetrain's environment variables, with Accelerate's names read as aliases.

``DRIVETRAIN_X`` is the name drivetrain documents; ``ACCELERATE_X`` is read too, so job
scripts and cluster templates written for Accelerate keep working. Both set to different
values is an error that names both.
"""

from __future__ import annotations

import os
from typing import Mapping

from .errors import ConfigError

PREFIX = "DRIVETRAIN_"
ALIAS_PREFIX = "ACCELERATE_"

_TRUE = ("1", "true", "yes", "on", "y")
_FALSE = ("0", "false", "no", "off", "n", "")


def names_of(key: str) -> tuple[str, str]:
    """``("DRIVETRAIN_KEY", "ACCELERATE_KEY")`` for a key such as ``"MIXED_PRECISION"``."""
    return PREFIX + key, ALIAS_PREFIX + key


def read(key: str, default: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The value of ``DRIVETRAIN_<key>`` or its alias ``ACCELERATE_<key>``."""
    env = os.environ if env is None else env
    own, alias = names_of(key)
    mine, theirs = env.get(own), env.get(alias)
    if mine is not None and theirs is not None and mine.strip() != theirs.strip():
        raise ConfigError(
            f"{own}={mine!r} and {alias}={theirs!r} disagree; unset one of them "
            f"({alias} is read as an alias of {own})"
        )
    value = mine if mine is not None else theirs
    return default if value is None else value


def read_bool(key: str, default: bool = False, env: Mapping[str, str] | None = None) -> bool:
    value = read(key, env=env)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"{PREFIX}{key}={value!r} is not a boolean; use 1/0, true/false or yes/no")


def read_int(key: str, default: int | None = None, env: Mapping[str, str] | None = None) -> int | None:
    value = read(key, env=env)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{PREFIX}{key}={value!r} is not a whole number") from None


def read_list(key: str, env: Mapping[str, str] | None = None) -> list[str]:
    value = read(key, env=env) or ""
    return [part.strip() for part in value.split(",") if part.strip()]
