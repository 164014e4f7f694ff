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


def _variable_name(key: str, env: Mapping[str, str] | None) -> str:
    """The name the user set: ``DRIVETRAIN_<key>``, or its alias when only that is set."""
    own, alias = names_of(key)
    return alias if (env if env is not None else os.environ).get(own) is None and \
        (env if env is not None else os.environ).get(alias) is not None else own


def parse_number(value: str, name: str, kind: type = int, minimum: float | None = None,
                 strictly: bool = False) -> int | float:
    """``value`` as a whole number (``kind=int``) or a number, at least ``minimum`` (greater
    than it with ``strictly``); a :class:`ConfigError` naming ``name`` otherwise."""
    try:
        number = kind(value.strip())
    except (ValueError, OverflowError):
        what = "a whole number" if kind is int else "a number"
        raise ConfigError(f"{name}={value!r} is not {what}") from None
    if kind is float and number != number:  # NaN compares false with every bound
        raise ConfigError(f"{name}={value!r} is not a number")
    if minimum is not None and (number < minimum or (strictly and number == minimum)):
        bound = f"greater than {minimum:g}" if strictly else f"at least {minimum:g}"
        raise ConfigError(f"{name}={value!r} must be {bound}")
    return number


def read_int(key: str, default: int | None = None, env: Mapping[str, str] | None = None,
             minimum: int | None = None) -> int | None:
    """``DRIVETRAIN_<key>`` (or its alias) as a whole number of at least ``minimum``; a
    :class:`ConfigError` naming the variable that is set otherwise."""
    value = read(key, env=env)
    if value in (None, ""):
        return default
    return int(parse_number(value, _variable_name(key, env), int, minimum))


def read_float(key: str, default: float | None = None, env: Mapping[str, str] | None = None,
               minimum: float | None = None, strictly: bool = False) -> float | None:
    """``DRIVETRAIN_<key>`` (or its alias) as a number, checked like :func:`read_int`."""
    value = read(key, env=env)
    if value in (None, ""):
        return default
    return float(parse_number(value, _variable_name(key, env), float, minimum, strictly))


def read_choice(key: str, choices: tuple[str, ...], default: str | None = None,
                env: Mapping[str, str] | None = None) -> str | None:
    """``DRIVETRAIN_<key>`` (or its alias), one of ``choices`` (any case)."""
    value = read(key, env=env)
    if value in (None, ""):
        return default
    for choice in choices:
        if value.strip().lower() == choice.lower():
            return choice
    raise ConfigError(f"{_variable_name(key, env)}={value!r} is not allowed; use one of {', '.join(choices)}")


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


#: The modes ``torch.compile(mode=...)`` accepts.
DYNAMO_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def read_device_name(key: str, env: Mapping[str, str] | None = None) -> str | None:
    """A device name such as ``cpu`` or ``<type>:1`` (type, optionally ``:index``), or ``None`` when unset."""
    value = read(key, env=env)
    if value is None:
        return None
    kind, _, index = value.strip().partition(":")
    if not kind.replace("_", "").isalnum() or (index and not index.isdigit()) or (":" in value and not index):
        raise ConfigError(f"{_variable_name(key, env)}={value!r} is not a device; give a device type and optionally "
                          "an index, e.g. cpu or <type>:1 (a type the platform knows)")
    return value.strip()


def _flag(key: str) -> Callable[[Mapping[str, str] | None], object]:
    return lambda env: None if read(key, env=env) is None else read_bool(key, env=env)


#: The core's typed variables and how each is read. The code that uses one reads it through
#: :func:`read_checked`, and ``drivetrain launch`` checks them all with :func:`check_variables`
#: before any process starts: a bad value is one line, not one traceback per rank.
CHECKED: dict[str, Callable[[Mapping[str, str] | None], object]] = {
    "GRADIENT_ACCUMULATION_STEPS": lambda env: read_int("GRADIENT_ACCUMULATION_STEPS", env=env, minimum=1),
    "TIMEOUT": lambda env: read_float("TIMEOUT", env=env, minimum=0, strictly=True),
    "CHECKPOINT_COMMIT_TIMEOUT": lambda env: read_int("CHECKPOINT_COMMIT_TIMEOUT", env=env, minimum=1),
    "CHECKPOINT_THREADS": lambda env: read_int("CHECKPOINT_THREADS", env=env, minimum=1),
    "PREEMPTION_GRACE": lambda env: read_float("PREEMPTION_GRACE", env=env, minimum=0, strictly=True),
    "DYNAMO_MODE": lambda env: read_choice("DYNAMO_MODE", DYNAMO_MODES, env=env),
    "TORCH_DEVICE": lambda env: read_device_name("TORCH_DEVICE", env=env),
    **{key: _flag(key) for key in ("DYNAMO_USE_FULLGRAPH", "DYNAMO_USE_DYNAMIC", "DYNAMO_USE_REGIONAL_COMPILATION",
                                   "DEBUG_MODE", "USE_CPU")},
}


def read_checked(key: str, default: object = None, env: Mapping[str, str] | None = None) -> object:
    """The value of the core variable ``key`` (see :data:`CHECKED`), or ``default`` when unset.

    Raises:
        ConfigError: the value is not of the variable's type or range; the message names it.
    """
    value = CHECKED[key](env)
    return default if value is None else value


def check_variables(env: Mapping[str, str] | None = None) -> None:
    """Read every variable of :data:`CHECKED` (a :class:`ConfigError` at the first bad one)."""
    for key in CHECKED:
        if read(key, env=env) is not None:
            CHECKED[key](env)
