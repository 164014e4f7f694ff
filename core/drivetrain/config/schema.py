"""What a config file may contain, and the checks that give one clear error per mistake.

The core owns the keys every run has (``num_processes``, ``mixed_precision``, ...). Everything
else belongs to a plugin, which describes it with
:class:`~drivetrain.plugin_api.ConfigSection` from ``drivetrain_register_config_sections``:

- a section with a ``key`` is a block (``fsdp_config: {...}``) whose keys are its fields;
- a section whose ``key`` is ``""`` lists top-level keys owned by that plugin (Accelerate
  files carry a few device-specific keys at the top level).

A key nobody owns is an error naming it, except a block that turns nothing on (empty, or
only ``false``/``no``/empty values): Accelerate writes such blocks for features a machine
does not use, and an unchanged Accelerate file must load.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..kernel.environment import DYNAMO_MODES
from ..kernel.errors import ConfigError
from ..kernel.descriptors import ConfigField, ConfigSection
from ..kernel.plugin_manager import PluginManager, PluginStatus
from ..selection.enums import enum_text

#: Keys of the core, in the order they are written.
CORE_FIELDS: tuple[ConfigField, ...] = (
    ConfigField("compute_environment", str, "LOCAL_MACHINE", help="where the job runs"),
    ConfigField("distributed_type", str, "NO",
                help="NO for one process, the platform's multi-process type, or a strategy's type"),
    ConfigField("num_processes", int, 1, help="processes in total, on all machines"),
    ConfigField("num_machines", int, 1, help="machines taking part"),
    ConfigField("machine_rank", int, 0, help="index of this machine (0 is the main one)"),
    ConfigField("main_process_ip", str, None, help="address of machine 0"),
    ConfigField("main_process_port", int, None, help="port on machine 0 for the rendezvous"),
    ConfigField("rdzv_backend", str, "static", choices=("static", "c10d", "etcd", "etcd-v2"),
                help="rendezvous between machines"),
    ConfigField("same_network", bool, True, help="all machines are on one local network"),
    ConfigField("main_training_function", str, "main", help="function a notebook-style launch calls"),
    ConfigField("mixed_precision", str, "no", help="no, or a precision a plugin offers"),
    ConfigField("use_cpu", bool, False, help="run on the CPU even if an accelerator is present"),
    ConfigField("debug", bool, False, help="check shapes before every collective"),
    ConfigField("gradient_accumulation_steps", int, None, help="steps to accumulate before an update"),
    ConfigField("platform", str, None, help="platform plugin to use (default: detected)"),
    ConfigField("strategy", str, None, help="strategy plugin to use (default: from distributed_type)"),
    ConfigField("precision_backend", str, None, help="implementation of the mixed precision to use"),
)

#: Blocks of the core.
CORE_BLOCKS: tuple[ConfigSection, ...] = (
    ConfigSection("dynamo_config", fields=(
        ConfigField("dynamo_backend", str, "NO", help="torch.compile backend"),
        ConfigField("dynamo_mode", str, None, choices=DYNAMO_MODES, help="torch.compile mode"),
        ConfigField("dynamo_use_fullgraph", bool, False, help="compile the whole model as one graph"),
        ConfigField("dynamo_use_dynamic", bool, False, help="compile for dynamic shapes"),
        ConfigField("dynamo_use_regional_compilation", bool, False, help="compile repeated blocks once"),
    ), description="torch.compile of prepared models"),
)

_EMPTY_WORDS = ("", "no", "none", "false")


def is_empty(value: Any) -> bool:
    """Whether a value turns nothing on: ``None``, ``false``, ``"no"``, ``""``, ``[]``, ``{}``,
    or a mapping of such values."""
    if value is None or value is False:
        return True
    if isinstance(value, str):
        return value.strip().lower() in _EMPTY_WORDS
    if isinstance(value, (list, tuple)):
        return len(value) == 0
    if isinstance(value, dict):
        return all(is_empty(v) for v in value.values())
    return False


@dataclass
class Owner:
    """Who owns a key: the core (``plugin=None``) or a plugin, and what the key is."""

    plugin: str | None
    field: ConfigField | None = None  # a top-level key
    section: ConfigSection | None = None  # a block
    declared_in: ConfigSection | None = None  # the section that lists a top-level key
    usable: bool = True
    reason: str = ""
    install: str | None = None


@dataclass
class Schema:
    """Every key a config file may contain here, with its owner."""

    owners: dict[str, Owner] = field(default_factory=dict)
    not_loaded: list[str] = field(default_factory=list)  # plugins whose keys are unknown
    precisions: list[str] = field(default_factory=list)
    platforms: dict[str, Any] = field(default_factory=dict)  # name -> PlatformSpec
    strategies: dict[str, Any] = field(default_factory=dict)  # name -> StrategySpec
    distributed_types: dict[str, str] = field(default_factory=dict)  # TYPE -> what it names

    def sections(self) -> Iterable[tuple[str, Owner]]:
        return ((key, owner) for key, owner in self.owners.items() if owner.section is not None)

    def enabled_plugin_keys(self, active: set[str]) -> Iterable[tuple[str, Owner]]:
        """Plugin keys and blocks of usable plugins whose section applies to a run described by
        ``active`` (its distributed type, platform and strategy names, upper case)."""
        for key, owner in self.owners.items():
            if owner.plugin is None or not owner.usable:
                continue
            section = owner.section or owner.declared_in
            enabled_when = section.enabled_when if section is not None else None
            if enabled_when is None or enabled_when.upper() in active:
                yield key, owner


def build_schema(manager: PluginManager) -> Schema:
    """Collect the core's keys and every loaded plugin's sections."""
    schema = Schema()
    for core_field in CORE_FIELDS:
        schema.owners[core_field.name] = Owner(None, field=core_field)
    for block in CORE_BLOCKS:
        schema.owners[block.key] = Owner(None, section=block)
    for plugin, section in manager.registrations("drivetrain_register_config_sections"):
        record = manager.records[plugin]
        common = dict(usable=record.usable, reason=record.reason, install=record.install)
        if section.key:
            schema.owners[section.key] = Owner(plugin, section=section, **common)
        else:
            for plugin_field in section.fields:
                schema.owners.setdefault(plugin_field.name,
                                         Owner(plugin, field=plugin_field, declared_in=section, **common))
    schema.not_loaded = sorted(
        f"{r.name} ({r.status.value})" for r in manager.records.values()
        if r.status in (PluginStatus.BLOCKED, PluginStatus.DISABLED, PluginStatus.FAILED)
    )
    schema.precisions = ["no", *dict.fromkeys(spec.name for _p, spec in
                                              manager.registrations("drivetrain_register_precisions"))]
    for plugin, spec in manager.registrations("drivetrain_register_platforms"):
        schema.platforms.setdefault(spec.name, spec)
        for kind in (spec.multi_process_type, spec.single_process_type):
            if kind and kind.upper() != "NO":
                schema.distributed_types.setdefault(kind.upper(), f"platform {spec.name}")
    for plugin, spec in manager.registrations("drivetrain_register_strategies"):
        schema.strategies.setdefault(spec.name, (plugin, spec))
        if spec.distributed_type:
            schema.distributed_types.setdefault(spec.distributed_type.upper(), f"strategy {spec.name}")
    for plugin, name in manager.registrations("drivetrain_distributed_types"):
        schema.distributed_types.setdefault(enum_text(name).upper(), f"plugin {plugin}")
    schema.distributed_types.setdefault("NO", "one process")
    return schema


# ------------------------------------------------------------------ values


def _type_name(kind: type) -> str:
    return {str: "a string", int: "a whole number", float: "a number", bool: "true or false",
            list: "a list", dict: "a mapping"}.get(kind, kind.__name__)


def coerce(spec: ConfigField, value: Any, where: str) -> Any:
    """``value`` checked against ``spec`` (type and choices); an error naming ``where``."""
    if value is None:
        return None
    kind = spec.type
    problem = None
    if kind is bool:
        if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "false", "no", "0"):
            value = value.strip().lower() in ("true", "yes", "1")
        elif not isinstance(value, bool):
            problem = True
    elif kind is int:
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        elif isinstance(value, bool) or not isinstance(value, int):
            problem = True
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                value = float(value)
            except (TypeError, ValueError):
                problem = True
        else:
            value = float(value)
    elif kind is str:
        if value is False and spec.choices and "no" in [str(c).lower() for c in spec.choices]:
            value = "no"  # YAML reads an unquoted `no` as false
        elif isinstance(value, bool) and spec.default in ("no", "yes"):
            value = "yes" if value else "no"
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        elif not isinstance(value, str):
            problem = True
    elif kind is list:
        if isinstance(value, tuple):
            value = list(value)
        elif not isinstance(value, list):
            problem = True
    elif kind is dict:
        if not isinstance(value, dict):
            problem = True
    if problem:
        raise ConfigError(f"{where} must be {_type_name(kind)}, not {value!r}")
    if spec.choices is not None:
        value = _choice(value, spec.choices, where)
    return value


def _choice(value: Any, choices: Iterable[Any], where: str) -> Any:
    choices = list(choices)
    for choice in choices:
        if choice == value or (isinstance(choice, str) and isinstance(value, str) and choice.lower() == value.lower()):
            return choice
    raise ConfigError(f"{where} is {value!r}; allowed: {', '.join(map(str, choices))}")


def suggest(word: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""
