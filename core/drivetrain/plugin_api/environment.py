"""Reading a plugin's environment variables, with Accelerate's names read as aliases.

``read_pair(own, alias)`` reads ``DRIVETRAIN_FSDP_X`` or, as an alias, ``FSDP_X``; two values
that mean different things are a ``ConfigError`` naming both. ``as_env_value`` is how an
option travels to launched processes.
"""

from ..kernel.environment import (
    ALIAS_PREFIX,
    PREFIX,
    as_env_value,
    names_of,
    own_name,
    parse_bool,
    read,
    read_bool,
    read_int,
    read_list,
    read_pair,
)

__all__ = [
    "ALIAS_PREFIX", "PREFIX", "as_env_value", "names_of", "own_name", "parse_bool", "read", "read_bool",
    "read_int", "read_list", "read_pair",
]
