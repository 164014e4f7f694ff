"""Accelerate's enumerations, open to plugins.

``DistributedType``, ``PrecisionType``, ``LoggerType`` and ``RNGType`` are string
enumerations whose members compare equal to their strings. The core defines the members
that need no plugin; plugins contribute the rest (``DistributedType.FSDP`` comes from the
plugin that registers that strategy), so a third-party platform can report its own name.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Callable, Iterator


class _OpenEnumMeta(type):
    """Looks up members the class does not define among those plugins contribute."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value = cls._contributed().get(name)
        if value is None:
            raise AttributeError(f"{cls.__name__} has no member {name!r}; known: {', '.join(cls.names())}")
        return cls(value)

    def __iter__(cls) -> Iterator[Any]:
        return iter([cls(value) for value in cls.values()])

    def __contains__(cls, item: Any) -> bool:
        text = enum_text(item)
        return text in cls.values() or text.upper() in cls.names()

    def __getitem__(cls, name: str) -> Any:
        try:
            return getattr(cls, name)
        except AttributeError:
            raise KeyError(name) from None


class OpenStrEnum(str, metaclass=_OpenEnumMeta):
    """A string with enum manners: ``.name``, ``.value``, iteration, membership."""

    _core: dict[str, str] = {}
    _source: Callable[[], dict[str, str]] | None = None
    _case: Callable[[str], str] = staticmethod(str.upper)
    # Accelerate defines some of its enums as ``(str, Enum)``, whose ``str()`` and f-string
    # give ``"DistributedType.MULTI_CPU"``, and others over its ``BaseEnum``, which give the
    # value; a class sets this to follow the first kind. Equality with the value holds for both.
    _str_names_member: bool = False

    def __new__(cls, value: Any) -> "OpenStrEnum":
        text = cls._case(enum_text(value))
        # One object per value, as with a real Enum: `state.distributed_type is DistributedType.NO`.
        members = cls.__dict__.get("_members")
        if members is None:
            members = {}
            setattr(cls, "_members", members)
        member = members.get(text)
        if member is None:
            member = members[text] = super().__new__(cls, text)
        return member

    def __reduce__(self) -> tuple:
        return (type(self), (self.value,))

    def __copy__(self) -> "OpenStrEnum":
        return self

    def __deepcopy__(self, memo: dict) -> "OpenStrEnum":
        return self

    @classmethod
    def _contributed(cls) -> dict[str, str]:
        found = dict(cls._core)
        if cls._source is not None:
            for value in cls._source():
                found.setdefault(value.upper().replace("-", "_"), cls._case(value))
        for name, value in _enum_members(cls.__name__).items():
            found.setdefault(name, cls._case(value))
        return found

    @classmethod
    def names(cls) -> list[str]:
        return list(cls._contributed())

    @classmethod
    def values(cls) -> list[str]:
        return list(cls._contributed().values())

    @classmethod
    def list(cls) -> list[str]:
        return cls.values()

    @property
    def value(self) -> str:
        return str.__str__(self)

    @property
    def name(self) -> str:
        return self.value.upper().replace("-", "_")

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value!r}>"

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}" if self._str_names_member else self.value

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def enum_text(value: Any) -> str:
    """The plain text of ``value``: a member's value (whatever its ``str()`` shows), else ``str(value)``."""
    if isinstance(value, Enum):
        value = value.value
    return str.__str__(value) if isinstance(value, str) else str(value)


def _enum_members(enum_name: str) -> dict[str, str]:
    """Members plugins contribute to ``enum_name`` through ``drivetrain_enum_members``."""
    from ..kernel.plugin_manager import get_plugin_manager

    found: dict[str, str] = {}
    for _plugin, (name, members) in get_plugin_manager().registrations("drivetrain_enum_members"):
        if name != enum_name:
            continue
        pairs = members.items() if isinstance(members, dict) else ((v.upper().replace("-", "_"), v) for v in members)
        for member, value in pairs:
            found.setdefault(member, value)
    return found


def _registered(hook_name: str, attribute: str) -> Callable[[], list[str]]:
    def collect() -> list[str]:
        from ..kernel.plugin_manager import get_plugin_manager

        found = []
        for _plugin, item in get_plugin_manager().registrations(hook_name):
            value = item if isinstance(item, str) else getattr(item, attribute, None)
            if value:
                found.append(value)
        return found

    return collect


def _distributed_types() -> list[str]:
    from ..kernel.plugin_manager import get_plugin_manager

    manager = get_plugin_manager()
    found = [item for _p, item in manager.registrations("drivetrain_distributed_types")]
    for hook, attributes in (
        ("drivetrain_register_platforms", ("multi_process_type", "single_process_type")),
        ("drivetrain_register_strategies", ("distributed_type",)),
    ):
        for _p, spec in manager.registrations(hook):
            found.extend(getattr(spec, a) for a in attributes if getattr(spec, a, None))
    return found


class DistributedType(OpenStrEnum):
    """How this run is distributed: ``NO``, ``MULTI_CPU``, or a plugin's type."""

    _core = {"NO": "NO", "MULTI_CPU": "MULTI_CPU"}
    _str_names_member = True
    _source = staticmethod(_distributed_types)


class PrecisionType(OpenStrEnum):
    """The ``mixed_precision`` values: ``no``, ``fp16``, ``bf16`` and those plugins offer."""

    _core = {"NO": "no", "FP16": "fp16", "BF16": "bf16"}
    _source = staticmethod(_registered("drivetrain_register_precisions", "name"))
    _case = staticmethod(str.lower)


class LoggerType(OpenStrEnum):
    """Tracker names for ``log_with``: ``all`` and every installed tracker."""

    _core = {"ALL": "all"}
    _source = staticmethod(_registered("drivetrain_register_trackers", "name"))
    _case = staticmethod(str.lower)


class RNGType(OpenStrEnum):
    """Random generators kept in step across processes: ``torch``, ``generator`` and each
    platform's device generator (named after the platform)."""

    _core = {"TORCH": "torch", "GENERATOR": "generator"}
    _source = staticmethod(_registered("drivetrain_register_platforms", "name"))
    _case = staticmethod(str.lower)


class ComputeEnvironment(OpenStrEnum):
    """Where the job runs (kept for config-file compatibility)."""

    _core = {"LOCAL_MACHINE": "LOCAL_MACHINE", "AMAZON_SAGEMAKER": "AMAZON_SAGEMAKER"}
    _str_names_member = True


def _compile_backends() -> list[str]:
    import torch._dynamo

    return list(torch._dynamo.list_backends(exclude_tags=()))


class DynamoBackend(OpenStrEnum):
    """``torch.compile`` backends accepted by ``dynamo_backend``: those torch knows here."""

    _core = {"NO": "NO", "EAGER": "EAGER", "AOT_EAGER": "AOT_EAGER", "INDUCTOR": "INDUCTOR"}
    _source = staticmethod(_compile_backends)


class CustomDtype(OpenStrEnum):
    """Weight types torch has no dtype for, used in device maps and quantization: ``int4``,
    ``int2``, and those precision plugins contribute."""

    _core = {"INT4": "int4", "INT2": "int2"}
    _case = staticmethod(str.lower)
    _str_names_member = True


class SageMakerDistributedType(OpenStrEnum):
    """Distribution of a SageMaker job (kept for config-file compatibility)."""

    _core = {"NO": "NO", "DATA_PARALLEL": "DATA_PARALLEL", "MODEL_PARALLEL": "MODEL_PARALLEL"}
    _str_names_member = True
