"""Reading and writing the config file (YAML or JSON, safe loader only)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

CONFIG_NAME = "default_config.yaml"


def default_config_path() -> Path:
    """``$DRIVETRAIN_CONFIG_FILE``, else ``$HF_HOME/drivetrain/default_config.yaml``
    (``HF_HOME`` defaults to ``$XDG_CACHE_HOME/huggingface``, then ``~/.cache/huggingface``)."""
    explicit = os.environ.get("DRIVETRAIN_CONFIG_FILE")
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    hf_home = os.environ.get("HF_HOME") or os.path.join(cache, "huggingface")
    return Path(hf_home).expanduser() / "drivetrain" / CONFIG_NAME


@dataclass
class Config:
    """The top-level keys of a config file; plugin blocks are kept in ``sections``."""

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
    gpu_ids: str | None = None
    downcast_bf16: str = "no"
    enable_cpu_affinity: bool = False
    gradient_accumulation_steps: int | None = None
    dynamo_config: dict[str, Any] = field(default_factory=dict)
    platform: str | None = None
    strategy: str | None = None
    sections: dict[str, Any] = field(default_factory=dict)
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("sections", "path")}
        data.update(self.sections)
        return {k: v for k, v in data.items() if v is not None}


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}; check the path or run `drivetrain config`") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}".replace("\n", " ")) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys to values, not a {type(data).__name__}")
    return data


def load_config(path: str | os.PathLike | None = None) -> Config | None:
    """The config at ``path`` (or the default location); ``None`` when there is none."""
    explicit = path is not None
    path = Path(path) if explicit else default_config_path()
    if not path.exists():
        if explicit:
            raise ConfigError(f"config file {path} does not exist; create it with `drivetrain config --config-file {path}`")
        return None
    data = _read(path)
    known = {f.name for f in fields(Config)} - {"sections", "path"}
    config = Config(path=str(path))
    for key, value in data.items():
        if key in known:
            setattr(config, key, value)
        else:
            config.sections[key] = value
    return config


def write_basic_config(mixed_precision: str = "no", save_location: str | os.PathLike | None = None) -> Path | bool:
    """Write a config for this machine (all its devices, or one CPU process).

    Returns the path written, or ``False`` when a config already exists there.
    """
    path = Path(save_location) if save_location is not None else default_config_path()
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    config = Config(mixed_precision=str(mixed_precision).lower())
    with open(path, "w", encoding="utf-8") as handle:
        if path.suffix == ".json":
            json.dump(config.to_dict(), handle, indent=2)
        else:
            yaml.safe_dump(config.to_dict(), handle, sort_keys=True)
    return path
