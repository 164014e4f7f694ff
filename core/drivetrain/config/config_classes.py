"""The config file as Accelerate's dataclasses (``drivetrain.commands.config.config_args``, which
is this module).

:class:`ClusterConfig` has a field for every key a config file may hold here: the core's, and
those of each installed plugin's config sections (so a backend's keys appear with its plugin).
Reading goes through :mod:`drivetrain.config.file` (safe loader, one clear error per bad key);
:class:`SageMakerConfig` keeps Accelerate's SageMaker files readable, although drivetrain does
not launch on SageMaker.
"""

from __future__ import annotations

import copy
import enum
import json
import os
from dataclasses import dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import Any

import yaml

from . import file as _file
from .schema import build_schema
from ..kernel.errors import ConfigFileNotFoundError
from ..selection.enums import ComputeEnvironment, DistributedType, PrecisionType, SageMakerDistributedType
from ..kernel.plugin_manager import get_plugin_manager
from ..selection.enums import enum_text

hf_cache_home = os.path.expanduser(
    os.environ.get("HF_HOME", os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")))
#: drivetrain's own config folder (``drivetrain config`` writes there).
cache_dir = str(_file.default_config_path().parent)
default_yaml_config_file = str(_file.default_config_path())
default_json_config_file = str(Path(default_yaml_config_file).with_suffix(".json"))
default_config_file = default_json_config_file if (
    os.path.isfile(default_json_config_file) and not os.path.isfile(default_yaml_config_file)
) else default_yaml_config_file


def load_config_from_file(config_file: str | os.PathLike | None) -> "BaseConfig":
    """The config at ``config_file`` (or the default one): a :class:`SageMakerConfig` when its
    ``compute_environment`` is ``AMAZON_SAGEMAKER``, else a :class:`ClusterConfig`.

    Raises:
        FileNotFoundError: the file does not exist (or, with ``None``, no default file does).
        ValueError: the file has an unknown key or an invalid value (a ``ConfigError``).
    """
    if config_file is None:
        found = _file.find_config_path()
        if found is None:
            raise ConfigFileNotFoundError(f"there is no config file at {default_config_file}; write one with "
                                          "`drivetrain config` or pass --config_file")
        config_file_path = found
    else:
        config_file_path = Path(config_file).expanduser()
        if not config_file_path.is_file():
            raise ConfigFileNotFoundError(f"config file {config_file} does not exist; pass an existing file, or "
                                          "write one with `drivetrain config --config-file PATH`")
    data = _read(config_file_path)
    environment = data.get("compute_environment") or ComputeEnvironment.LOCAL_MACHINE
    kind = SageMakerConfig if environment == ComputeEnvironment.AMAZON_SAGEMAKER else ClusterConfig
    return kind.from_dict(data, str(config_file_path))


def _read(path: Path) -> dict[str, Any]:
    data = _file._read(path)
    return _upgrade(dict(data))


def _upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Keys of older Accelerate files under their current names (``fp16``, ``dynamo_backend``)."""
    data.setdefault("compute_environment", ComputeEnvironment.LOCAL_MACHINE.value)
    if "fp16" in data:
        fp16 = data.pop("fp16")
        data.setdefault("mixed_precision", "fp16" if fp16 else "no")
    if "dynamo_backend" in data:
        backend = data.pop("dynamo_backend")
        data["dynamo_config"] = {} if str(backend).upper() == "NO" else {"dynamo_backend": backend}
    data.setdefault("mixed_precision", "no")
    return data


def _plain(value: Any) -> Any:
    """``value`` with enum members replaced by their values, so YAML's safe dumper accepts it."""
    if isinstance(value, (enum.Enum, str)):
        return enum_text(value)
    if isinstance(value, dict):
        return {enum_text(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _as_enum(kind: type, value: Any) -> Any:
    """``value`` as a member of ``kind`` when it names one; a value it does not know is kept as it
    is (the file's checks, not this conversion, report wrong values)."""
    if value is None or isinstance(value, kind):
        return value
    try:
        return kind(value)
    except (ValueError, KeyError, TypeError):
        return value


@dataclass
class BaseConfig:
    """Keys every config file has, and reading and writing as YAML or JSON."""

    compute_environment: Any
    distributed_type: Any
    mixed_precision: Any
    use_cpu: bool
    debug: bool

    _distributed_kind = DistributedType

    def __post_init__(self) -> None:
        # YAML reads an unquoted `NO` / `no` as false (Accelerate's own files write `distributed_type: NO`)
        if self.distributed_type is False:
            self.distributed_type = "NO"
        if self.mixed_precision is False:
            self.mixed_precision = "no"
        self.compute_environment = _as_enum(ComputeEnvironment, self.compute_environment)
        self.distributed_type = _as_enum(self._distributed_kind, self.distributed_type)
        if self.mixed_precision is None:
            self.mixed_precision = "no"
        self.mixed_precision = _as_enum(PrecisionType, str(self.mixed_precision).lower())

    def to_dict(self) -> dict[str, Any]:
        """Every field whose value is not ``None``, enum members as their values."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "config") -> "BaseConfig":
        """An instance from a file's keys (older key names accepted).

        Raises:
            ValueError: a key this class has no field for.
        """
        data = _upgrade(dict(data))
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise _file.ConfigError(
                f"{where} has unknown keys ({', '.join(repr(k) for k in unknown)}); remove them, or install the "
                "plugin that owns them (`drivetrain plugins list`)")
        return cls(**data)

    @classmethod
    def from_json_file(cls, json_file: str | os.PathLike | None = None) -> "BaseConfig":
        path = Path(json_file if json_file is not None else default_json_config_file)
        return cls.from_dict(_read(path), str(path))

    @classmethod
    def from_yaml_file(cls, yaml_file: str | os.PathLike | None = None) -> "BaseConfig":
        path = Path(yaml_file if yaml_file is not None else default_yaml_config_file)
        return cls.from_dict(_read(path), str(path))

    def to_json_file(self, json_file: str | os.PathLike) -> None:
        _write(Path(json_file), json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    def to_yaml_file(self, yaml_file: str | os.PathLike) -> None:
        _write(Path(yaml_file), yaml.safe_dump(self.to_dict(), sort_keys=True, default_flow_style=False))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


_BASE_NAMES = {f.name for f in fields(BaseConfig)}


def _cluster_fields() -> list[tuple[str, Any, Any]]:
    """A field for each core key and each key an installed plugin's config sections declare."""
    schema = build_schema(get_plugin_manager())
    result = []
    for key, owner in schema.owners.items():
        if key in _BASE_NAMES:
            continue
        if owner.section is not None or owner.field is None:
            default: Any = {} if owner.plugin is None else None  # the core's blocks are always read
        else:
            default = owner.field.default
        if isinstance(default, (list, dict, set)):
            result.append((key, Any, field(default_factory=lambda value=default: copy.deepcopy(value))))
        else:
            result.append((key, Any, field(default=default)))
    return result


class _ClusterBase(BaseConfig):
    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "config") -> "BaseConfig":
        checked = _file.config_from_dict(_upgrade(dict(data)), path=None if where == "config" else where)
        return super().from_dict(checked.to_dict(), where)


ClusterConfig = make_dataclass(
    "ClusterConfig", _cluster_fields(), bases=(_ClusterBase,),
    namespace={"__module__": __name__, "__doc__": "A config for this machine or a cluster of machines: the "
               "core's keys and those of the installed plugins' config sections."},
)

@dataclass
class SageMakerConfig(BaseConfig):
    """An Accelerate config for Amazon SageMaker (read and written; drivetrain does not launch there)."""

    ec2_instance_type: str = "ml.p3.2xlarge"
    iam_role_name: str | None = None
    image_uri: str | None = None
    profile: str | None = None
    region: str = "us-east-1"
    num_machines: int = 1
    gpu_ids: str = "all"
    base_job_name: str | None = None
    pytorch_version: str | None = None
    transformers_version: str | None = None
    py_version: str | None = None
    sagemaker_inputs_file: str | None = None
    sagemaker_metrics_file: str | None = None
    additional_args: dict | None = None
    dynamo_config: dict | None = None
    enable_cpu_affinity: bool = False

    _distributed_kind = SageMakerDistributedType


__all__ = [
    "BaseConfig", "ClusterConfig", "SageMakerConfig", "cache_dir", "default_config_file",
    "default_json_config_file", "default_yaml_config_file", "hf_cache_home", "load_config_from_file",
]
