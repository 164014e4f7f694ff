"""Reading, checking and writing the config file (YAML or JSON, safe loader only).

Where the file lives, first match wins:

1. ``$DRIVETRAIN_CONFIG_FILE``;
2. ``$HF_HOME/drivetrain/default_config.yaml`` when ``HF_HOME`` is set;
3. ``$XDG_CONFIG_HOME/drivetrain/default_config.yaml`` (``~/.config`` when unset).

When drivetrain has no file of its own, Accelerate's (``$HF_HOME/accelerate/`` or
``$XDG_CACHE_HOME/huggingface/accelerate/``, ``default_config.yaml`` then ``.json``) is read,
so a machine set up with ``accelerate config`` works unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from ..kernel import environment
from ..kernel.errors import ConfigError, ConfigFileNotFoundError
from ..kernel.plugin_manager import PluginManager, get_plugin_manager
from ..selection.choice import CPU_PLATFORM
from ..selection.enums import enum_text
from .schema import CORE_FIELDS, Owner, Schema, build_schema, coerce, is_empty, suggest

logger = logging.getLogger(__name__)

CONFIG_NAME = "default_config.yaml"
PATH_VARIABLE = "DRIVETRAIN_CONFIG_FILE"


def _home_dir(variable: str, fallback: str | None = None) -> Path:
    """The directory a variable such as ``XDG_CONFIG_HOME`` names (``~/<fallback>`` when unset).

    Raises:
        ConfigError: the variable names something that is not a directory.
    """
    named = os.environ.get(variable)
    if named:
        path = Path(named).expanduser()
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{variable}={named} is a file, not a directory; point it at a directory or unset it")
        return path
    return Path(os.path.join(os.path.expanduser("~"), fallback or "")).expanduser()


def default_config_path() -> Path:
    """Where drivetrain reads and writes its config file when none is named."""
    explicit = environment.read_pair(PATH_VARIABLE, "ACCELERATE_CONFIG_FILE")
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get("HF_HOME"):
        return _home_dir("HF_HOME") / "drivetrain" / CONFIG_NAME
    return _home_dir("XDG_CONFIG_HOME", ".config") / "drivetrain" / CONFIG_NAME


def accelerate_config_paths() -> list[Path]:
    """Where Accelerate keeps its default config on this machine."""
    hf_home = _home_dir("HF_HOME") if os.environ.get("HF_HOME") else \
        _home_dir("XDG_CACHE_HOME", ".cache") / "huggingface"
    folder = hf_home / "accelerate"
    return [folder / CONFIG_NAME, folder / "default_config.json"]


def find_config_path() -> Path | None:
    """The file a launch without ``--config-file`` reads, or ``None`` when there is none.

    Raises:
        ConfigError: ``DRIVETRAIN_CONFIG_FILE`` names a file that does not exist.
    """
    named = environment.read_pair(PATH_VARIABLE, "ACCELERATE_CONFIG_FILE")
    if named:
        path = Path(named).expanduser()
        if not path.exists():
            raise ConfigError(f"{PATH_VARIABLE}={named} names no file; create it with `drivetrain config` "
                              f"or unset {PATH_VARIABLE}")
        check_readable_file(path, f"{PATH_VARIABLE}={named}: config file")
        return path
    own = default_config_path()
    if own.exists():
        return own
    return next((path for path in accelerate_config_paths() if path.exists()), None)


@dataclass
class Config:
    """A checked config file. Core keys are attributes; plugin keys and blocks are in
    ``sections`` (``sections["fsdp_config"]``, or a plugin's top-level key)."""

    compute_environment: str = "LOCAL_MACHINE"
    distributed_type: str = "NO"
    num_processes: int = 1
    num_machines: int = 1
    machine_rank: int = 0
    main_process_ip: str | None = None
    main_process_port: int | None = None
    rdzv_backend: str = "static"
    same_network: bool = True
    main_training_function: str = "main"
    mixed_precision: str = "no"
    use_cpu: bool = False
    debug: bool = False
    gradient_accumulation_steps: int | None = None
    platform: str | None = None
    strategy: str | None = None
    precision_backend: str | None = None
    dynamo_config: dict[str, Any] = field(default_factory=dict)
    sections: dict[str, Any] = field(default_factory=dict)
    path: str | None = None

    def get(self, key: str, default: Any = None) -> Any:
        """Any key of the file: a core attribute, a plugin's top-level key or block."""
        if key in self.sections:
            return self.sections[key]
        if key in _CORE_ATTRIBUTES:
            return getattr(self, key)
        return default

    def to_dict(self) -> dict[str, Any]:
        """The keys to write, sorted like Accelerate's files; ``None`` values are left out."""
        data = {name: getattr(self, name) for name in _CORE_ATTRIBUTES}
        data.update(self.sections)
        return {key: data[key] for key in sorted(data) if data[key] is not None}


_CORE_ATTRIBUTES = [f.name for f in fields(Config) if f.name not in ("sections", "path")]


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping with two different values
    (YAML keeps the last silently, so one of the two values the user wrote would be ignored).
    The same value repeated loses nothing, and files written by hand do repeat keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, tuple[int, yaml.Node]] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` overrides on purpose
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, (str, int, float, bool)):
                continue
            if key in seen:
                first_line, first_node = seen[key]
                if self.construct_object(first_node, deep=True) != self.construct_object(value_node, deep=True):
                    raise ConfigError(f"key {key!r} is given twice with different values (lines {first_line} and "
                                      f"{line}); keep one of them")
            else:
                seen[key] = (line, value_node)
        return super().construct_mapping(node, deep=deep)


def _unique_json_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result and result[key] != value:
            raise ConfigError(f"key {key!r} is given twice with different values; keep one of them")
        result[key] = value
    return result


def check_readable_file(path: Path, what: str = "config file") -> None:
    """A config file must be a regular file: reading a FIFO or a device would wait or never end."""
    if path.exists() and not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file (a FIFO, socket or device)"
        raise ConfigError(f"{what} {path} is {kind}; name a YAML or JSON file")


def _read(path: Path) -> dict[str, Any]:
    check_readable_file(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}; check the path or run "
                          "`drivetrain config`") from None
    try:
        if b"\0" in raw:
            raise UnicodeDecodeError("utf-8", raw, raw.index(b"\0"), raw.index(b"\0") + 1, "NUL byte")
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not a text file (binary or not UTF-8); name a YAML or JSON "
                          "file, or write one with `drivetrain config`") from None
    try:
        # JSON is read as YAML too (Accelerate sometimes writes JSON into a .yaml file)
        if path.suffix == ".json":
            data = json.loads(text, object_pairs_hook=_unique_json_keys)
        else:
            data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        detail = " ".join(str(exc).split())
        raise ConfigError(f"config file {path} is not valid {kind}: {detail}") from None
    except ConfigError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys to values, not a {type(data).__name__}")
    bad = [key for key in data if not isinstance(key, str)]
    if bad:
        raise ConfigError(f"config file {path}: key {bad[0]!r} is not a string; quote it")
    return data


def load_config(path: str | os.PathLike | None = None, manager: PluginManager | None = None) -> Config | None:
    """The checked config at ``path`` (or the default location); ``None`` when there is none.

    Raises:
        ConfigError: the file cannot be read, is not YAML/JSON, has an unknown key, a value
            of the wrong type, or an impossible combination. The message names the key.
    """
    if path is None:
        found = find_config_path()
        if found is None:
            return None
        path = found
    else:
        path = _existing(path)
    return config_from_dict(_read(path), manager, path=str(path))


def _existing(path: str | os.PathLike) -> Path:
    path = Path(path).expanduser()
    if not path.exists():
        raise ConfigFileNotFoundError(f"config file {path} does not exist; create it with "
                                      f"`drivetrain config --config-file {path}`")
    return path


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The keys of the config file at ``path`` as written, read safely but not checked.

    Raises:
        ConfigFileNotFoundError: there is no such file.
        ConfigError: it cannot be read, or is not a YAML/JSON mapping.
    """
    return _read(_existing(path))


def config_from_dict(data: dict[str, Any], manager: PluginManager | None = None, path: str | None = None) -> Config:
    """Check ``data`` (a config file's content) and turn it into a :class:`Config`."""
    manager = manager or get_plugin_manager()
    schema = build_schema(manager)
    where = f"config file {path}" if path else "config"
    config = Config(path=path)
    chosen = {enum_text(data.get(name) or "").upper() for name in ("distributed_type", "strategy", "platform")}
    for key, value in data.items():
        owner = schema.owners.get(key)
        if owner is None:
            _unowned(key, value, schema, where, config)
        elif owner.section is not None:
            enabled_when = owner.section.enabled_when
            block = _block(key, value, owner, where, in_use=enabled_when is None or enabled_when.upper() in chosen)
            if owner.plugin is None:
                setattr(config, key, block)
            else:
                config.sections[key] = block
        elif owner.plugin is None:
            setattr(config, key, coerce(owner.field, value, f"{where}: key {key!r}"))
        else:
            config.sections[key] = _plugin_value(key, value, owner, where)
    check_combinations(config, schema, where)
    return config


def _unowned(key: str, value: Any, schema: Schema, where: str, config: Config) -> None:
    if isinstance(value, dict) and is_empty(value):
        config.sections[key] = value  # a block for a feature this machine does not use
        return
    hint = suggest(key, schema.owners)
    if not hint and schema.not_loaded:
        hint = f" (plugins not loaded here: {', '.join(schema.not_loaded)}; it may be theirs)"
    raise ConfigError(f"{where}: unknown key {key!r}{hint}; no installed plugin owns it. "
                      "Remove it, or install the plugin that does (`drivetrain plugins list`)")


def _unusable(key: str, owner: Owner, where: str) -> ConfigError:
    reason = owner.reason or "see `drivetrain plugins list`"
    if owner.install and owner.install not in reason:
        reason += f"; install it with: {owner.install}"
    return ConfigError(f"{where}: key {key!r} belongs to plugin {owner.plugin!r}, which cannot be used here: "
                       f"{reason}; or remove the key")


def _plugin_value(key: str, value: Any, owner: Owner, where: str) -> Any:
    if not owner.usable and owner.field.needs_library:
        if is_empty(value) or value == owner.field.default:
            try:
                return coerce(owner.field, value, f"{where}: key {key!r}")
            except ConfigError:
                return value
        raise _unusable(key, owner, where)
    return coerce(owner.field, value, f"{where}: key {key!r}")


def _block(key: str, value: Any, owner: Owner, where: str, in_use: bool = True) -> dict[str, Any]:
    """The checked block ``key``. A block the file's choice does not use (an ``fsdp_config`` left
    in a Megatron-LM file) is kept with a warning when it has an unknown key or its plugin cannot
    be used here: nothing reads it, and the same file choosing it is refused."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {key!r} must be a mapping of keys to values, not {value!r}")
    if owner.plugin is not None and not owner.usable:
        if is_empty(value):
            return dict(value)
        if not in_use:
            logger.warning("%s: %s is kept but not used: plugin %r cannot be used here (%s) and the config does "
                           "not choose it", where, key, owner.plugin, owner.reason or "see `drivetrain plugins list`")
            return dict(value)
        raise _unusable(key, owner, where)
    section = owner.section
    known = {f.name: f for f in section.fields}
    checked: dict[str, Any] = {}
    for inner, inner_value in value.items():
        spec = known.get(inner)
        if spec is None:
            if section.allow_unknown:
                checked[inner] = inner_value
                continue
            if not in_use:
                logger.warning("%s: unknown key %s.%s%s, ignored: %s is not used by this config", where, key, inner,
                               suggest(inner, known), key)
                checked[inner] = inner_value
                continue
            allowed = ", ".join(sorted(known)) or "none"
            raise ConfigError(f"{where}: unknown key {key}.{inner}{suggest(inner, known)}; "
                              f"{key} accepts: {allowed}")
        checked[inner] = coerce(spec, inner_value, f"{where}: key {key}.{inner}")
    return checked


def check_combinations(config: Config, schema: Schema, where: str = "config") -> None:
    """Impossible combinations of values, each reported with the keys involved."""
    for key in ("num_processes", "num_machines", "gradient_accumulation_steps"):
        if getattr(config, key) is not None and getattr(config, key) < 1:
            raise ConfigError(f"{where}: key {key!r} must be at least 1, not {getattr(config, key)}")
    if config.num_processes % config.num_machines:
        raise ConfigError(f"{where}: num_processes ({config.num_processes}) must be a multiple of num_machines "
                          f"({config.num_machines}); num_processes counts the processes of every machine")
    if not 0 <= config.machine_rank < config.num_machines:
        raise ConfigError(f"{where}: machine_rank ({config.machine_rank}) must be between 0 and "
                          f"num_machines - 1 ({config.num_machines - 1})")
    if config.num_machines > 1 and not config.main_process_ip:
        raise ConfigError(f"{where}: num_machines is {config.num_machines} but main_process_ip is not set; "
                          "give the address of machine 0")
    if config.main_process_port is not None and not 0 < config.main_process_port < 65536:
        raise ConfigError(f"{where}: main_process_port ({config.main_process_port}) is not a port number")
    precision = str(config.mixed_precision).lower()
    if precision not in [p.lower() for p in schema.precisions]:
        raise ConfigError(f"{where}: mixed_precision is {config.mixed_precision!r}; installed plugins offer: "
                          f"{', '.join(schema.precisions)}")
    config.mixed_precision = precision
    kind = enum_text(config.distributed_type).upper()
    if kind not in schema.distributed_types:
        raise ConfigError(f"{where}: distributed_type is {config.distributed_type!r}{suggest(kind, schema.distributed_types)}; "
                          f"installed plugins know: {', '.join(sorted(schema.distributed_types))}")
    config.distributed_type = kind
    if kind == "NO" and config.num_processes > 1:
        raise ConfigError(f"{where}: distributed_type is NO (one process) but num_processes is "
                          f"{config.num_processes}; set distributed_type to a multi-process type or num_processes to 1")
    for key, known in (("platform", schema.platforms), ("strategy", schema.strategies)):
        name = getattr(config, key)
        if name and name.lower() not in ("none", "no") and name.lower() not in {n.lower() for n in known}:
            raise ConfigError(f"{where}: {key} is {name!r}; installed: {', '.join(sorted(known)) or 'none'}")
    platform = _platform_of(config, schema)
    if config.use_cpu and platform is not None and platform.name != CPU_PLATFORM:
        raise ConfigError(f"{where}: use_cpu is true but distributed_type {kind} / platform {platform.name!r} "
                          "needs another device; remove one of them")
    strategy = _configured_strategy(config, schema)
    if strategy is not None:
        plugin, spec = strategy
        if platform is not None and spec.platforms is not None and platform.name not in spec.platforms:
            raise ConfigError(f"{where}: strategy {spec.name!r} (distributed_type {kind}) does not run on platform "
                              f"{platform.name!r}; it supports {', '.join(spec.platforms)}")
        if spec.precisions is not None and precision != "no" and precision not in spec.precisions:
            raise ConfigError(f"{where}: mixed_precision {precision!r} is not supported by strategy {spec.name!r} "
                              f"(it supports {', '.join(spec.precisions) or 'none'}); set mixed_precision to one of them or 'no'")
    if platform is not None and platform.precisions is not None and precision != "no" \
            and precision not in platform.precisions:
        raise ConfigError(f"{where}: mixed_precision {precision!r} is not supported by platform {platform.name!r} "
                          f"(it supports {', '.join(platform.precisions) or 'none'}); set mixed_precision to one of them or 'no'")


def _platform_of(config: Config, schema: Schema) -> Any:
    if config.platform:
        return next((s for n, s in schema.platforms.items() if n.lower() == config.platform.lower()), None)
    kind = config.distributed_type.upper()
    for spec in schema.platforms.values():
        if kind != "NO" and kind in (str(spec.multi_process_type).upper(), str(spec.single_process_type).upper()):
            return spec
    return None


def _configured_strategy(config: Config, schema: Schema) -> Any:
    if config.strategy and config.strategy.lower() not in ("none", "no"):
        return next((pair for n, pair in schema.strategies.items() if n.lower() == config.strategy.lower()), None)
    kind = config.distributed_type.upper()
    return next((pair for pair in schema.strategies.values()
                 if pair[1].distributed_type and pair[1].distributed_type.upper() == kind), None)


def dump(data: dict[str, Any], path: Path) -> None:
    """Write ``data`` to ``path`` atomically: YAML, or JSON for a ``.json`` name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        text = json.dumps(data, indent=2) + "\n"
    else:
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def write_config(config: Config, path: str | os.PathLike | None = None) -> Path:
    """Check ``config`` and write it (to its own path, or ``path``)."""
    target = Path(path) if path is not None else Path(config.path) if config.path else default_config_path()
    config_from_dict(config.to_dict(), path=str(target))  # never write a file that cannot be read back
    dump(config.to_dict(), target)
    config.path = str(target)
    return target


def basic_config(mixed_precision: str = "no", manager: PluginManager | None = None) -> Config:
    """A config for this machine: one process per device of the detected platform."""
    from ..selection.choice import Requests, choose_platform

    manager = manager or get_plugin_manager()
    candidate, _reason = choose_platform(manager, Requests())
    platform = manager.construct(candidate.plugin, candidate.spec, f"platform {candidate.name!r}")
    count = max(int(platform.device_count() or 1), 1)
    cpu = candidate.spec.name == CPU_PLATFORM
    if cpu:
        count = 1
    return Config(
        distributed_type=candidate.spec.multi_process_type if count > 1 else "NO",
        num_processes=count,
        mixed_precision=str(getattr(mixed_precision, "value", mixed_precision)).lower(),
        use_cpu=cpu,
    )


def write_basic_config(mixed_precision: str = "no", save_location: str | os.PathLike | None = None) -> Path | bool:
    """Write a config for this machine: every device of the detected platform, or one CPU process.

    Args:
        mixed_precision: ``"no"``, ``"fp16"``, ``"bf16"`` or another installed precision.
        save_location: where to write (default: :func:`default_config_path`).

    Returns the path written, or ``False`` when a file already exists there (it is kept).
    """
    path = Path(save_location).expanduser() if save_location is not None else default_config_path()
    if path.exists():
        print(f"Not writing a config: {path} already exists. Remove it, or edit it with `drivetrain config`.")
        return False
    return write_config(basic_config(mixed_precision), path)


def update_config(path: str | os.PathLike | None = None) -> Path:
    """Rewrite an existing config with every current key, keeping its values."""
    config = load_config(path)
    if config is None:
        raise ConfigError(f"there is no config file at {default_config_path()}; create one with `drivetrain config`")
    return write_config(config, config.path)


__all__ = [
    "CONFIG_NAME", "CORE_FIELDS", "Config", "accelerate_config_paths", "basic_config", "config_from_dict",
    "default_config_path", "dump", "find_config_path", "load_config", "read_config_file", "update_config",
    "write_basic_config",
    "write_config",
]
