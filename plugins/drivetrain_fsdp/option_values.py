"""Resolved FSDP option values that are also equal to torch's objects for the same choice.

Accelerate's ``FullyShardedDataParallelPlugin`` holds torch objects after construction
(``ShardingStrategy.FULL_SHARD``, ``CPUOffload(offload_params=True)``, ``MixedPrecision(...)``),
and code written for it compares them with those objects. drivetrain's plugin resolves its
options without importing torch (``drivetrain launch`` checks them before any process starts),
so it holds names and flags; these types make each of them equal to the torch object Accelerate
would hold as well as to the name, without importing torch here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Mapping


class OptionName(str):
    """A resolved choice (``"FULL_SHARD"``), equal to the string and to torch's enum member of
    that name (``ShardingStrategy.FULL_SHARD``, ``StateDictType.FULL_STATE_DICT``)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return str.__eq__(self, other)
        if isinstance(other, enum.Enum):  # torch spells one member _HYBRID_SHARD_ZERO2
            return str.__eq__(self, other.name.lstrip("_"))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = str.__hash__

    def __repr__(self) -> str:
        return str.__repr__(str(self))


class CpuOffload:
    """Whether parameters are offloaded to CPU memory: true or false, and equal to torch's
    object for that choice (FSDP1 ``CPUOffload(offload_params=...)``; FSDP2 ``CPUOffloadPolicy()``
    when on, ``OffloadPolicy()`` when off)."""

    __slots__ = ("enabled",)

    def __init__(self, enabled: bool) -> None:
        self.enabled = bool(enabled)

    def __bool__(self) -> bool:
        return self.enabled

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (bool, CpuOffload)):
            return self.enabled == bool(other)
        kind = type(other).__name__
        if kind == "CPUOffload":
            return self.enabled == bool(getattr(other, "offload_params", False))
        if kind == "CPUOffloadPolicy":
            return self.enabled
        if kind == "OffloadPolicy":
            return not self.enabled
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.enabled)

    def __repr__(self) -> str:
        return repr(self.enabled)


class PrecisionPolicy(dict):
    """The mixed-precision policy as dtype names (``{"param_dtype": "bfloat16", ...}``), equal to
    an equal dict and to torch's ``MixedPrecision`` / ``MixedPrecisionPolicy`` with those dtypes
    (a field this policy does not name is ``None`` here)."""

    DTYPE_FIELDS = ("param_dtype", "reduce_dtype", "buffer_dtype", "output_dtype")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict.__eq__(self, dict(other))
        if not hasattr(other, "param_dtype"):
            return NotImplemented
        for name in self.DTYPE_FIELDS:
            if hasattr(other, name):
                theirs = getattr(other, name)
                theirs = None if theirs is None else str(theirs).removeprefix("torch.")
                if self.get(name) != theirs:
                    return False
            elif self.get(name) is not None:
                return False
        if "cast_forward_inputs" in self and hasattr(other, "cast_forward_inputs"):
            return bool(self["cast_forward_inputs"]) == bool(other.cast_forward_inputs)
        return True

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]  # a dict: mutable


@dataclass
class StateDictSettings:
    """What Accelerate's default ``state_dict_config`` / ``optim_state_dict_config`` say (torch's
    ``FullStateDictConfig(offload_to_cpu=True, rank0_only=True)`` for a full state dict): the
    gathered weights go to CPU memory, on the main process only."""

    offload_to_cpu: bool = True
    rank0_only: bool = True
