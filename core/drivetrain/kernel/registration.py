"""Checks what registration hooks return, item by item, before anything else sees it.

A registration hook must return a list of one descriptor type (a mapping for
``drivetrain_public_names``). An item of the wrong type, or a descriptor whose fields are
junk, is refused on its own, with the plugin named, instead of breaking every consumer of
that hook later. Each item also has an identity (a platform's name, a precision's name and
backend, a config block's key): the first plugin to register an identity keeps it. Built-in
plugins load first, so a third-party plugin can never take over a built-in's name.

Nothing here imports torch.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from .descriptors import (
    ATTRIBUTE_OWNERS,
    BackendAttribute,
    ClusterEnvironmentSpec,
    ConfigField,
    ConfigSection,
    LauncherSpec,
    PlatformSpec,
    PrecisionSpec,
    StrategySpec,
    TrackerSpec,
)

#: Hooks that return a mapping; each ``(key, value)`` pair is one item.
MAPPING_HOOKS = ("drivetrain_public_names", "drivetrain_fallback_names", "drivetrain_enum_members")

#: What each registration hook must return a list of (``None``: a mapping, checked below),
#: in the order they are collected.
ITEM_TYPE: dict[str, type | None] = {
    "drivetrain_register_platforms": PlatformSpec,
    "drivetrain_register_cluster_environments": ClusterEnvironmentSpec,
    "drivetrain_register_strategies": StrategySpec,
    "drivetrain_register_precisions": PrecisionSpec,
    "drivetrain_register_trackers": TrackerSpec,
    "drivetrain_register_launchers": LauncherSpec,
    "drivetrain_register_config_sections": ConfigSection,
    "drivetrain_distributed_types": str,
    "drivetrain_public_names": None,
    "drivetrain_fallback_names": None,
    "drivetrain_enum_members": None,
    "drivetrain_register_backend_attributes": BackendAttribute,
}

#: How an item is called in messages.
ITEM_WORD = {
    "drivetrain_register_platforms": "platform",
    "drivetrain_register_cluster_environments": "cluster environment",
    "drivetrain_register_strategies": "strategy",
    "drivetrain_register_precisions": "mixed precision",
    "drivetrain_register_trackers": "tracker",
    "drivetrain_register_launchers": "launcher",
    "drivetrain_register_config_sections": "config section",
    "drivetrain_distributed_types": "distributed type",
    "drivetrain_public_names": "public name",
    "drivetrain_fallback_names": "fallback name",
    "drivetrain_enum_members": "enumeration",
    "drivetrain_register_backend_attributes": "backend attribute",
}

_LAZY_REF = re.compile(r"^[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?$")


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) and value else "a non-empty string"


def _optional_text(value: Any) -> str | None:
    return None if value is None or isinstance(value, str) else "a string or None"


def _plain_text(value: Any) -> str | None:
    return None if isinstance(value, str) else "a string"


def _lazy_ref(value: Any) -> str | None:
    if callable(value) or (isinstance(value, str) and _LAZY_REF.match(value)):
        return None
    return "a 'module:attribute' string or a callable"


def _optional_lazy_ref(value: Any) -> str | None:
    return None if value is None else _lazy_ref(value)


def _callable(value: Any) -> str | None:
    return None if callable(value) else "a callable"


def _integer(value: Any) -> str | None:
    return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"


def _flag(value: Any) -> str | None:
    return None if isinstance(value, bool) else "True or False"


def _attribute_owner(value: Any) -> str | None:
    return None if value in ATTRIBUTE_OWNERS else f"one of {', '.join(ATTRIBUTE_OWNERS)}"


def _public_identifier(value: Any) -> str | None:
    if isinstance(value, str) and value.isidentifier() and not value.startswith("_"):
        return None
    return "a public attribute name"


def _names(value: Any) -> str | None:
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return None
    return "a list of strings"


def _optional_names(value: Any) -> str | None:
    return None if value is None else _names(value)


def _config_fields(value: Any) -> str | None:
    if isinstance(value, (list, tuple)) and all(isinstance(v, ConfigField) and isinstance(v.name, str) and v.name
                                                for v in value):
        return None
    return "a list of ConfigField with names"


# Descriptor field -> its check. A field not listed is not checked (a description, a default).
_FIELD_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "owner": _attribute_owner,
    "name": _text,
    "backend": _text,
    "key": _plain_text,
    "factory": _lazy_ref,
    "hooks": _optional_lazy_ref,
    "probe": _callable,
    "applies": _callable,
    "priority": _integer,
    "multi_process_type": _text,
    "single_process_type": _text,
    "distributed_type": _optional_text,
    "communication": _optional_text,
    "config_section": _optional_text,
    "enabled_when": _optional_text,
    "platforms": _optional_names,
    "precisions": _optional_names,
    "accelerator_arguments": _names,
    "fields": _config_fields,
    "automatic": _flag,
    "places_models": _flag,
    "needs_multiple_processes": _flag,
    "requires_logging_directory": _flag,
    "allow_unknown": _flag,
}


def _describe(item: Any) -> str:
    text = repr(item)
    return text if len(text) <= 60 else text[:57] + "..."


def _dotted_name(value: Any) -> bool:
    return isinstance(value, str) and all(part.isidentifier() for part in value.split("."))


def _enum_members(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and k.isidentifier() and isinstance(v, str) for k, v in value.items())
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value)


def answer_problem(hook_name: str, answer: Any) -> str | None:
    """Why a hook's whole answer is unusable (not a list, not a mapping), or ``None``."""
    if hook_name in MAPPING_HOOKS:
        return None if isinstance(answer, dict) else f"returned {type(answer).__name__} {_describe(answer)}, not a dict"
    if isinstance(answer, (list, tuple)):
        return None
    expected = ITEM_TYPE[hook_name].__name__
    return f"returned {type(answer).__name__} {_describe(answer)}, not a list of {expected}"


def item_problem(hook_name: str, item: Any) -> str | None:
    """Why one item a registration hook returned is unusable, or ``None``.

    ``item`` is a descriptor, a string (distributed types) or a ``(name, reference)`` pair
    (public names).
    """
    expected = ITEM_TYPE[hook_name]
    word = ITEM_WORD[hook_name]
    if hook_name == "drivetrain_enum_members":
        name, members = item
        if not isinstance(name, str) or not name.isidentifier():
            return f"{hook_name} returned the key {_describe(name)}, which is not an enumeration's name"
        if not _enum_members(members):
            return (f"{hook_name} returned {_describe(members)} for {name!r}, not a list of values or a dict of "
                    "member name -> value")
        return None
    if expected is None:
        name, ref = item
        if not _dotted_name(name):
            return f"{hook_name} returned the key {_describe(name)}, which is not a Python name"
        problem = _lazy_ref(ref)
        return f"{word} {name!r} must map to {problem}, not {_describe(ref)}" if problem else None
    if not isinstance(item, expected):
        return f"{hook_name} returned {_describe(item)}, which is not a {expected.__name__}"
    if expected is str:
        return None if item else f"{hook_name} returned an empty string"
    if isinstance(item, BackendAttribute) and _public_identifier(item.name):
        return f"BackendAttribute {item.name!r}: name must be {_public_identifier(item.name)}"
    for field_name, check in _FIELD_CHECKS.items():
        if not hasattr(item, field_name):
            continue
        problem = check(getattr(item, field_name))
        if problem:
            label = getattr(item, "name", None) or getattr(item, "key", None) or "?"
            return (f"{expected.__name__} {label!r}: {field_name} must be {problem}, "
                    f"not {_describe(getattr(item, field_name))}")
    return None


def identities(hook_name: str, item: Any) -> list[str]:
    """The names an item claims; two plugins may not claim the same one.

    A precision is identified by name and backend (several backends of ``fp8`` may
    coexist); a config block by its key, and a block of top-level keys (``key=""``) by each
    of its fields. Distributed types claim nothing: two plugins naming the same member
    agree.
    """
    if hook_name in ("drivetrain_distributed_types", "drivetrain_enum_members"):
        return []
    if hook_name in MAPPING_HOOKS:
        return [item[0]]
    if isinstance(item, PrecisionSpec):
        return [f"{item.name.lower()} (backend {item.backend})"]
    if isinstance(item, ConfigSection):
        return [item.key] if item.key else [f"top-level key {f.name}" for f in item.fields]
    if isinstance(item, BackendAttribute):
        return [f"{item.owner}.{item.name}"]
    return [item.name.lower()]


def item_label(hook_name: str, item: Any) -> str:
    """How an item is named in a message: ``platform 'cpu'``."""
    if hook_name in MAPPING_HOOKS:
        return f"{ITEM_WORD[hook_name]} {item[0]!r}"
    if hook_name == "drivetrain_distributed_types":
        return f"distributed type {item!r}"
    name = getattr(item, "name", None) or getattr(item, "key", None)
    if isinstance(item, PrecisionSpec):
        return f"mixed precision {item.name!r} (backend {item.backend!r})"
    if isinstance(item, BackendAttribute):
        return f"backend attribute {item.owner}.{item.name}"
    return f"{ITEM_WORD[hook_name]} {name!r}" if isinstance(name, str) else ITEM_WORD[hook_name]
