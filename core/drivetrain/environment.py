"""drivetrain's environment variables, with Accelerate's names read as aliases.

``DRIVETRAIN_X`` is the name drivetrain documents; ``ACCELERATE_X`` is read too, so job
scripts and cluster templates written for Accelerate keep working. Both set to values that
mean different things is an error that names both (``1`` and ``true`` mean the same).

Plugins read their own variables the same way with :func:`read_pair`: a plugin option whose
Accelerate name is ``FSDP_SHARDING_STRATEGY`` is read from
``DRIVETRAIN_FSDP_SHARDING_STRATEGY`` or, as an alias, ``FSDP_SHARDING_STRATEGY``.
"""

from __future__ import annotations

import os
from typing import Callable, Mapping

from .errors import ConfigError

PREFIX = "DRIVETRAIN_"
ALIAS_PREFIX = "ACCELERATE_"

_TRUE = ("1", "true", "yes", "on", "y")
_FALSE = ("0", "false", "no", "off", "n", "")


def names_of(key: str) -> tuple[str, str]:
    """``("DRIVETRAIN_KEY", "ACCELERATE_KEY")`` for a key such as ``"MIXED_PRECISION"``."""
    return PREFIX + key, ALIAS_PREFIX + key


def own_name(alias: str) -> str:
    """drivetrain's name for a variable Accelerate users set: ``ACCELERATE_USE_CPU`` ->
    ``DRIVETRAIN_USE_CPU``, ``FSDP_OFFLOAD_PARAMS`` -> ``DRIVETRAIN_FSDP_OFFLOAD_PARAMS``."""
    if alias.startswith(ALIAS_PREFIX):
        return PREFIX + alias[len(ALIAS_PREFIX):]
    if alias.startswith(PREFIX):
        return alias
    return PREFIX + alias


def _same(a: str, b: str, meaning: Callable[[str], object] | None) -> bool:
    if a.strip() == b.strip():
        return True
    if meaning is None:
        return False
    try:
        return meaning(a) == meaning(b)
    except ConfigError:
        return False


def read_pair(own: str, alias: str, default: str | None = None, env: Mapping[str, str] | None = None,
              meaning: Callable[[str], object] | None = None) -> str | None:
    """The value of variable ``own``, or of its alias ``alias`` when ``own`` is unset.

    Args:
        own: drivetrain's name (``DRIVETRAIN_MIXED_PRECISION``).
        alias: the name Accelerate's launcher and users set (``ACCELERATE_MIXED_PRECISION``).
        default: returned when neither is set.
        env: the variables to read (``os.environ``).
        meaning: turns a value into what it means, so that two spellings of one value
            (``1`` and ``true``) are not reported as a conflict.

    Raises:
        ConfigError: both are set to values that mean different things.
    """
    env = os.environ if env is None else env
    mine, theirs = env.get(own), env.get(alias)
    if mine is not None and theirs is not None and not _same(mine, theirs, meaning):
        raise ConfigError(
            f"{own}={mine!r} and {alias}={theirs!r} disagree; unset one of them "
            f"({alias} is read as an alias of {own})"
        )
    value = mine if mine is not None else theirs
    return default if value is None else value


def read(key: str, default: str | None = None, env: Mapping[str, str] | None = None,
         meaning: Callable[[str], object] | None = None) -> str | None:
    """The value of ``DRIVETRAIN_<key>`` or its alias ``ACCELERATE_<key>``."""
    return read_pair(*names_of(key), default=default, env=env, meaning=meaning or _case_blind)


def _case_blind(value: str) -> str:
    return value.strip().lower()


def parse_bool(value: str, name: str = "value") -> bool:
    """``1/0``, ``true/false``, ``yes/no``, ``on/off`` (any case) as a boolean."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"{name}={value!r} is not a boolean; use 1/0, true/false or yes/no")


def read_bool(key: str, default: bool = False, env: Mapping[str, str] | None = None) -> bool:
    own, alias = names_of(key)
    value = read_pair(own, alias, env=env, meaning=parse_bool)
    if value is None:
        return default
    return parse_bool(value, own if (env if env is not None else os.environ).get(own) is not None else alias)


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


def as_env_value(value: object) -> str:
    """How an option's value travels in an environment variable: booleans as ``true``/
    ``false``, sequences comma-separated, anything else as ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)
