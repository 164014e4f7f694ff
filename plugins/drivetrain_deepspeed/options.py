"""The user's DeepSpeed options, with Accelerate's names: ``DeepSpeedPlugin``, ``DummyOptim``,
``DummyScheduler`` and ``get_active_deepspeed_plugin``.

A ``DeepSpeedPlugin`` holds a DeepSpeed config (``deepspeed_config``): the one given in
``hf_ds_config`` (a dict, or the path of a JSON or YAML file), or one built from its
options. Options left unset are read from the environment (``ACCELERATE_DEEPSPEED_ZERO_STAGE``
as Accelerate's launcher sets them, or drivetrain's ``DRIVETRAIN_DEEPSPEED_ZERO_STAGE``;
``drivetrain launch`` sets both from the ``deepspeed_config:`` block of the config file and
its ``--zero-stage``-style options). With a config file, an option fills the keys the file
leaves ``"auto"`` (or does not have); an option that contradicts a value written in the file
is an error naming both. The ``"auto"`` values that depend on the prepared objects (batch
sizes, optimizer and scheduler parameters, mixed precision) are filled by ``prepare``
(:mod:`drivetrain_deepspeed.autofill`).

This module imports neither torch nor deepspeed.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator, Mapping

from drivetrain.plugin_api import ConfigError, DrivetrainError, environment

from .compat import HfDeepSpeedConfig
from .option_names import DS_ACCELERATORS, OFFLOAD_DEVICES, OPTIONS

AUTO = "auto"
ZERO_STAGES = (0, 1, 2, 3)


def deepspeed_accelerator(platform_name: str, device_type: str | None = None) -> str:
    """DeepSpeed's accelerator for a drivetrain platform, or a clear error."""
    name = DS_ACCELERATORS.get(platform_name) or DS_ACCELERATORS.get(device_type or "")
    if name is None:
        raise ConfigError(f"DeepSpeed has no accelerator for platform {platform_name!r}; it runs on "
                          f"{', '.join(sorted(DS_ACCELERATORS))}")
    return name


#: DeepSpeed prints a progress line every `steps_per_print` steps; drivetrain's default config
#: leaves printing to the user.
QUIET_STEPS_PER_PRINT = 2**62


def _read_env(variable: str, env: Mapping[str, str] | None) -> str | None:
    """``DRIVETRAIN_<name>`` or Accelerate's ``ACCELERATE_<name>``; ``None`` when unset or empty."""
    value = environment.read_pair(environment.own_name(variable), variable, env=env,
                                  meaning=lambda text: text.strip().lower())
    return None if value is None or value.strip() == "" else value.strip()


def _env_name(option: str) -> str:
    return environment.own_name(OPTIONS[option][0])


# ------------------------------------------------------------------ config files


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """A DeepSpeed config file (JSON; YAML for ``.yaml``/``.yml``) as a dict, or a clear error."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"DeepSpeed config file {path} does not exist; give the path of a JSON file "
                          "(deepspeed_config_file / hf_ds_config)")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read DeepSpeed config file {path}: {exc.strerror}") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"DeepSpeed config file {path} is not valid YAML: {' '.join(str(exc).split())}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"DeepSpeed config file {path} is not valid JSON: {exc.msg} at line {exc.lineno}, "
                              f"column {exc.colno}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"DeepSpeed config file {path} must hold a JSON object of keys to values, "
                          f"not {type(data).__name__}")
    return data


def get_key(config: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """The value at dotted ``key`` (``"zero_optimization.stage"``), or ``default``."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def has_key(config: Mapping[str, Any], key: str) -> bool:
    marker = object()
    return get_key(config, key, marker) is not marker


def set_key(config: dict[str, Any], key: str, value: Any) -> None:
    """Set dotted ``key``, creating the mappings on the way."""
    parts = key.split(".")
    node = config
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_config(config: Mapping[str, Any], origin: str) -> None:
    """Refuse the mistakes DeepSpeed would report late or obscurely, one clear line each."""
    bad = [key for key in config if not isinstance(key, str)]
    if bad:
        raise ConfigError(f"{origin}: key {bad[0]!r} is not a string")

    def fail(key: str, wanted: str, value: Any) -> None:
        raise ConfigError(f"{origin}: {key} must be {wanted} (or \"auto\"), not {value!r}")

    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        value = config.get(key)
        if value is not None and value != AUTO and not (isinstance(value, int) and not isinstance(value, bool)
                                                        and value > 0):
            fail(key, "a whole number above 0", value)
    clip = config.get("gradient_clipping")
    if clip is not None and clip != AUTO and not (_is_number(clip) and clip >= 0):
        fail("gradient_clipping", "a number, 0 or more", clip)
    for block in ("zero_optimization", "fp16", "bf16", "optimizer", "scheduler"):
        value = config.get(block)
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(f"{origin}: {block} must be a mapping of keys to values, not {value!r}")
    zero = config.get("zero_optimization") or {}
    stage = zero.get("stage")
    if stage is not None and stage != AUTO and stage not in ZERO_STAGES:
        fail("zero_optimization.stage", "0, 1, 2 or 3", stage)
    for offload in ("offload_optimizer", "offload_param"):
        value = zero.get(offload)
        if value is None:
            continue
        if not isinstance(value, Mapping):
            raise ConfigError(f"{origin}: zero_optimization.{offload} must be a mapping such as "
                              f"{{\"device\": \"cpu\"}}, not {value!r}")
        device = value.get("device")
        if device is not None and device != AUTO and str(device).lower() not in OFFLOAD_DEVICES:
            fail(f"zero_optimization.{offload}.device", "none, cpu or nvme", device)
    for block in ("fp16", "bf16"):
        enabled = (config.get(block) or {}).get("enabled")
        if enabled is not None and enabled != AUTO and not isinstance(enabled, bool):
            fail(f"{block}.enabled", "true or false", enabled)
    for block in ("optimizer", "scheduler"):
        value = config.get(block)
        if value is None:
            continue
        if not isinstance(value.get("type"), str):
            raise ConfigError(f"{origin}: {block} needs a \"type\" (a DeepSpeed {block} name such as "
                              f"{'AdamW' if block == 'optimizer' else 'WarmupLR'}), got {value.get('type')!r}")
        if not isinstance(value.get("params", {}), Mapping):
            raise ConfigError(f"{origin}: {block}.params must be a mapping, not {value.get('params')!r}")


# ------------------------------------------------------------------ the options


def _as_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    return environment.parse_bool(str(value), where)


@dataclass
class DeepSpeedPlugin:
    """DeepSpeed's options for ``Accelerator(deepspeed_plugin=...)``, with Accelerate's names.

    Args:
        hf_ds_config: a DeepSpeed config: a dict, the path of a JSON (or YAML) file, or an
            ``HfDeepSpeedConfig``. Its ``"auto"`` values are filled by ``prepare``. Without one,
            a config is built from the options below. Once built, it is an
            ``HfDeepSpeedConfig`` whose ``config`` is this
            plugin's ``deepspeed_config`` dict itself, so an edit of either is seen by both.
        gradient_accumulation_steps: micro-batches per optimizer step (default: the
            ``Accelerator``'s). When set, it is also the ``Accelerator``'s.
        gradient_clipping: clip the global gradient norm to this value (DeepSpeed clips in
            its step; ``"auto"`` in a config file becomes this, else 1.0).
        zero_stage: 0 (off), 1 (optimizer states), 2 (and gradients), 3 (and parameters).
            Default 2.
        is_train_batch_min: with several data loaders of different batch sizes, the micro
            batch is the smallest (``True``) or the largest.
        offload_optimizer_device: ``none``, ``cpu`` or ``nvme``: where optimizer states live.
        offload_param_device: ``none``, ``cpu`` or ``nvme``: where parameters live (ZeRO-3).
        offload_optimizer_nvme_path: directory for ``nvme`` optimizer offload.
        offload_param_nvme_path: directory for ``nvme`` parameter offload.
        zero3_init_flag: build models partitioned (``deepspeed.zero.Init``) inside
            :meth:`zero3_init_context`; default on with ZeRO-3.
        zero3_save_16bit_model: under ZeRO-3, ``get_state_dict`` and ``save_model`` gather
            the 16-bit training weights instead of the fp32 master weights.
        transformer_moe_cls_names: comma-separated class names of mixture-of-experts layers
            that ZeRO-3 must treat as leaves (``MixtralSparseMoeBlock``).
        enable_msamp: train in FP8 with MS-AMP (must be installed).
        msamp_opt_level: MS-AMP's optimisation level, ``O1`` or ``O2``.
    """

    hf_ds_config: Any = None
    gradient_accumulation_steps: Any = None
    gradient_clipping: Any = None
    zero_stage: Any = None
    is_train_batch_min: bool = True
    offload_optimizer_device: Any = None
    offload_param_device: Any = None
    offload_optimizer_nvme_path: Any = None
    offload_param_nvme_path: Any = None
    zero3_init_flag: Any = None
    zero3_save_16bit_model: Any = None
    transformer_moe_cls_names: Any = None
    enable_msamp: Any = None
    msamp_opt_level: Any = None
    deepspeed_config: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._resolve(env=None)

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> "DeepSpeedPlugin":
        """The options the variables ``env`` describe (what a launched process will build)."""
        plugin = cls.__new__(cls)
        for spec in fields(cls):
            setattr(plugin, spec.name, spec.default if spec.init else {})
        plugin._resolve(env=env)
        return plugin

    # ---------------------------------------------------------------- resolution

    def _resolve(self, env: Mapping[str, str] | None) -> None:
        self._selected = False
        given: dict[str, str] = {}  # option -> where its value came from
        for spec in fields(self):
            if spec.init and getattr(self, spec.name) is not None and spec.name in OPTIONS:
                given[spec.name] = f"DeepSpeedPlugin({spec.name}=...)"
        for name, (variable, _key) in OPTIONS.items():
            if getattr(self, name) is None:
                value = _read_env(variable, env)
                if value is not None:
                    setattr(self, name, value)
                    given[name] = f"{_env_name(name)} (environment)"
        self._given = given
        self._coerce()
        if self.hf_ds_config is not None:
            self.deepspeed_config, self._origin = self._load_config(self.hf_ds_config)
            check_config(self.deepspeed_config, self._origin)
            if "zero_optimization" not in self.deepspeed_config:
                raise ConfigError(f"{self._origin}: Please specify the ZeRO optimization config in the DeepSpeed "
                                  "config. Add a \"zero_optimization\" block such as {\"stage\": 2}")
            self._merge_options_into_file()
            # Accelerate's default when the file leaves it out (an option given above has filled it)
            self.deepspeed_config.setdefault("gradient_accumulation_steps", 1)
        else:
            self._origin = "DeepSpeedPlugin"
            self.deepspeed_config = self._config_from_options()
        self._read_back_from_config()
        if getattr(self.hf_ds_config, "config", None) is not self.deepspeed_config:
            self.hf_ds_config = config_view(self.deepspeed_config)
        elif hasattr(self.hf_ds_config, "set_stage_and_offload"):  # the user's own, filled above
            self.hf_ds_config.set_stage_and_offload()
        if self.zero3_init_flag is None:
            self.zero3_init_flag = self.zero_stage == 3
        if self.zero3_init_flag and self.zero_stage != 3 and "zero3_init_flag" in given:
            # Accelerate only warns; the flag simply has no effect below ZeRO-3.
            self.zero3_init_flag = False
        if self.enable_msamp is None:
            self.enable_msamp = False
        if self.msamp_opt_level is None:
            self.msamp_opt_level = "O1"
        if str(self.msamp_opt_level) not in ("O1", "O2"):
            raise ConfigError(f"msamp_opt_level must be O1 or O2, not {self.msamp_opt_level!r}")

    def _coerce(self) -> None:
        def where(name: str) -> str:
            return self._given.get(name, name)

        if self.gradient_accumulation_steps is not None and self.gradient_accumulation_steps != AUTO:
            self.gradient_accumulation_steps = self._positive_int("gradient_accumulation_steps", where)
        if self.gradient_clipping is not None and self.gradient_clipping != AUTO:
            try:
                self.gradient_clipping = float(self.gradient_clipping)
            except (TypeError, ValueError):
                raise ConfigError(f"{where('gradient_clipping')}: gradient_clipping must be a number, "
                                  f"not {self.gradient_clipping!r}") from None
        if self.zero_stage is not None and self.zero_stage != AUTO:
            try:
                stage = int(self.zero_stage)
            except (TypeError, ValueError):
                stage = None
            if stage not in ZERO_STAGES:
                raise ConfigError(f"{where('zero_stage')}: zero_stage must be 0, 1, 2 or 3, not {self.zero_stage!r}")
            self.zero_stage = stage
        for name in ("offload_optimizer_device", "offload_param_device"):
            value = getattr(self, name)
            if value is not None and value != AUTO:
                value = str(value).strip().lower()
                if value not in OFFLOAD_DEVICES:
                    raise ConfigError(f"{where(name)}: {name} must be none, cpu or nvme, not {getattr(self, name)!r}")
                setattr(self, name, value)
        for name in ("zero3_init_flag", "zero3_save_16bit_model", "enable_msamp"):
            value = getattr(self, name)
            if value is not None and value != AUTO:
                setattr(self, name, _as_bool(value, where(name)))
        if isinstance(self.transformer_moe_cls_names, (list, tuple)):
            self.transformer_moe_cls_names = ",".join(self.transformer_moe_cls_names)

    def _positive_int(self, name: str, where: Any) -> int:
        value = getattr(self, name)
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = 0
        if number < 1 or (isinstance(value, float) and value != number):
            raise ConfigError(f"{where(name)}: {name} must be a whole number above 0, not {value!r}")
        return number

    @staticmethod
    def _load_config(source: Any) -> tuple[dict[str, Any], str]:
        if isinstance(source, Mapping):
            return copy.deepcopy(dict(source)), "DeepSpeed config (hf_ds_config dict)"
        if isinstance(source, (str, os.PathLike)):
            path = Path(source).expanduser().absolute()
            return read_config_file(path), f"DeepSpeed config file {path}"
        config = getattr(source, "config", None)  # an HfDeepSpeedConfig: its dict is shared, as in Accelerate
        if isinstance(config, dict):
            return config, f"DeepSpeed config ({type(source).__name__})"
        raise ConfigError(f"hf_ds_config must be a dict or the path of a DeepSpeed config file, "
                          f"not {type(source).__name__}")

    def _merge_options_into_file(self) -> None:
        """Options the user gave fill the file's ``"auto"`` (and missing) keys; a contradiction fails."""
        config = self.deepspeed_config
        for name, (_variable, key) in OPTIONS.items():
            if key is None or name not in self._given:
                continue
            value = getattr(self, name)
            if value == AUTO:
                continue
            if name.endswith("_nvme_path") and value == "none":
                continue
            present = get_key(config, key, None)
            if present is None or present == AUTO:
                set_key(config, key, value)
            elif not _same(present, value):
                raise ConfigError(
                    f"{self._given[name]} sets {name}={value!r} but {self._origin} has {key}={present!r}; "
                    f"remove one of them, or write \"auto\" in the file to take the option")
        # keys still "auto" that an option's default answers
        defaults = {"zero_optimization.stage": 2, "zero_optimization.offload_optimizer.device": "none",
                    "zero_optimization.offload_param.device": "none",
                    "zero_optimization.stage3_gather_16bit_weights_on_model_save": False}
        for key, default in defaults.items():
            if get_key(config, key) == AUTO:
                set_key(config, key, default)

    def _config_from_options(self) -> dict[str, Any]:
        stage = 2 if self.zero_stage in (None, AUTO) else self.zero_stage
        zero: dict[str, Any] = {"stage": stage}
        for kind in ("optimizer", "param"):
            device = getattr(self, f"offload_{kind}_device") or "none"
            if device in ("none", AUTO):
                continue
            block: dict[str, Any] = {"device": device}
            path = getattr(self, f"offload_{kind}_nvme_path")
            if device == "nvme":
                if path in (None, "none", AUTO):
                    raise ConfigError(f"offload_{kind}_device=nvme needs offload_{kind}_nvme_path "
                                      f"(a directory on a fast local disk)")
                block["nvme_path"] = path
            zero[f"offload_{kind}"] = block
        if self.zero3_save_16bit_model is not None and self.zero3_save_16bit_model != AUTO:
            zero["stage3_gather_16bit_weights_on_model_save"] = bool(self.zero3_save_16bit_model)
        gas = self.gradient_accumulation_steps
        config: dict[str, Any] = {
            "train_batch_size": AUTO,
            "train_micro_batch_size_per_gpu": AUTO,
            "gradient_accumulation_steps": AUTO if gas is None else gas,
            "zero_optimization": zero,
            "steps_per_print": QUIET_STEPS_PER_PRINT,
            "zero_allow_untested_optimizer": True,
        }
        if self.gradient_clipping not in (None, AUTO):
            config["gradient_clipping"] = self.gradient_clipping
        return config

    def _read_back_from_config(self) -> None:
        """The option attributes say what the config does (a file may set them itself)."""
        config = self.deepspeed_config
        stage = get_key(config, "zero_optimization.stage")
        self.zero_stage = stage if stage in ZERO_STAGES else 0  # DeepSpeed's default: no ZeRO
        for kind in ("optimizer", "param"):
            device = get_key(config, f"zero_optimization.offload_{kind}.device") or "none"
            setattr(self, f"offload_{kind}_device", str(device).lower())
            path = get_key(config, f"zero_optimization.offload_{kind}.nvme_path")
            setattr(self, f"offload_{kind}_nvme_path", path if path is not None else "none")
        save16 = get_key(config, "zero_optimization.stage3_gather_16bit_weights_on_model_save")
        self.zero3_save_16bit_model = bool(save16) if save16 not in (None, AUTO) else False
        gas = config.get("gradient_accumulation_steps")
        self.gradient_accumulation_steps = gas if isinstance(gas, int) else AUTO
        clip = config.get("gradient_clipping")
        self.gradient_clipping = clip if _is_number(clip) else None  # None: filled at prepare time

    # ---------------------------------------------------------------- filling by key

    def fill_match(self, ds_key_long: str, mismatches: list[str] | None = None, must_match: bool = True,
                   **kwargs: Any) -> None:
        """Fill dotted config key ``ds_key_long`` from ``kwargs`` when it is ``"auto"`` (an
        ``"auto"`` key missing from ``kwargs`` is an error); with ``must_match``, a value
        written in the config that differs from ``kwargs`` is added to ``mismatches``."""
        mismatches = [] if mismatches is None else mismatches
        node, key = _find_node(self.deepspeed_config, ds_key_long)
        if node is None:
            return
        if node.get(key) == AUTO:
            if ds_key_long not in kwargs:
                raise ConfigError(f"`{ds_key_long}` not found in kwargs. Please specify `{ds_key_long}` without "
                                  f"`auto` (set to correct value) in the DeepSpeed config file or pass it in kwargs.")
            node[key] = kwargs[ds_key_long]
            return
        if must_match and node.get(key) is not None and ds_key_long in kwargs and node[key] != kwargs[ds_key_long]:
            mismatches.append(f"- ds {ds_key_long}={node[key]} vs arg {ds_key_long}={kwargs[ds_key_long]}")

    def deepspeed_config_process(self, prefix: str = "", mismatches: list[str] | None = None,
                                 config: dict[str, Any] | None = None, must_match: bool = True,
                                 **kwargs: Any) -> None:
        """Fill the config's ``"auto"`` values from ``kwargs`` (dotted keys such as
        ``"optimizer.params.lr"``), as Accelerate's method of this name; with ``must_match``,
        every written value that contradicts ``kwargs`` is reported in one error."""
        mismatches = [] if mismatches is None else mismatches
        for key, value in (self.deepspeed_config if config is None else config).items():
            if isinstance(value, dict):
                self.deepspeed_config_process(prefix=f"{prefix}{key}.", mismatches=mismatches, config=value,
                                              must_match=must_match, **kwargs)
            else:
                self.fill_match(prefix + key, mismatches, must_match=must_match, **kwargs)
        if mismatches and prefix == "":
            listing = "\n".join(mismatches)
            raise ConfigError(f"Please correct the following DeepSpeed config values that mismatch kwargs values:\n"
                              f"{listing}\nThe easiest method is to set these DeepSpeed config values to 'auto'.")

    def replace_config(self, config: dict[str, Any]) -> None:
        """Make ``config`` the plugin's, in place: ``hf_ds_config`` (and through it
        transformers) keeps seeing ``deepspeed_config``."""
        if self.deepspeed_config is config:
            return
        self.deepspeed_config.clear()
        self.deepspeed_config.update(config)

    # ---------------------------------------------------------------- selection

    @property
    def selected(self) -> bool:
        """Whether this is the plugin the next ``prepare`` uses (``select_deepspeed_plugin``)."""
        return self._selected

    @selected.setter
    def selected(self, value: bool) -> None:
        raise SelectionError("DeepSpeedPlugin.selected changes only through "
                             "accelerator.state.select_deepspeed_plugin(name)")

    def select(self, _from_accelerator_state: bool = False) -> None:
        """Make this the active plugin: only ``select_deepspeed_plugin`` may (Accelerate's rule)."""
        if not _from_accelerator_state:
            raise ConfigError("a DeepSpeedPlugin is selected through accelerator.state.select_deepspeed_plugin(name), "
                              "not DeepSpeedPlugin.select()")
        self.set_deepspeed_weakref()
        self._selected = True

    def _unselect(self) -> None:
        self._selected = False

    def set_deepspeed_weakref(self) -> None:
        """Tell transformers the DeepSpeed config in use, as Accelerate does: its
        ``is_deepspeed_zero3_enabled()`` and ``deepspeed_config()`` answer from it, and
        ``from_pretrained`` then builds models partitioned under ZeRO-3 init. The object is kept
        here (``dschf``): transformers holds only a weak reference."""
        from drivetrain.plugin_api import is_package_available

        if not is_package_available("transformers"):
            return
        from transformers.integrations.deepspeed import HfDeepSpeedConfig, unset_hf_deepspeed_config

        config = copy.deepcopy(self.deepspeed_config)
        # values transformers (and ZeRO-3 init) read before prepare() fills the "auto" ones,
        # set as Accelerate sets them whatever the stage
        for key in ("gradient_accumulation_steps", "train_micro_batch_size_per_gpu"):
            if config.get(key, AUTO) == AUTO:
                config[key] = 1
        if config.get("train_batch_size") == AUTO:
            del config["train_batch_size"]
        unset_hf_deepspeed_config()
        self.dschf = HfDeepSpeedConfig(config)

    # ---------------------------------------------------------------- queries

    def is_auto(self, key: str) -> bool:
        """Whether dotted config ``key`` is ``"auto"`` (not filled yet)."""
        return get_key(self.deepspeed_config, key) == AUTO

    def get_value(self, key: str, default: Any = None) -> Any:
        """The value of dotted config ``key`` (``"zero_optimization.stage"``), or ``default``."""
        return get_key(self.deepspeed_config, key, default)

    @property
    def config_origin(self) -> str:
        """Where the config came from, for messages (``DeepSpeed config file /path``)."""
        return self._origin

    def is_zero3_init_enabled(self) -> bool:
        return bool(self.zero3_init_flag) and self.zero_stage == 3

    def set_mixed_precision(self, mixed_precision: str) -> None:
        """Enable ``fp16``/``bf16`` in the config for the run's mixed precision (fills ``"auto"``)."""
        from .autofill import fill_precision

        fill_precision(self.deepspeed_config, str(mixed_precision or "no").lower(), self._origin)

    @contextlib.contextmanager
    def zero3_init_context(self) -> Iterator[None]:
        """Build models inside this block partitioned across processes (ZeRO-3 with
        ``zero3_init_flag``), so no process ever holds a whole model; elsewhere a no-op::

            with accelerator.state.deepspeed_plugin.zero3_init_context():
                model = MyModel()
        """
        if not self.is_zero3_init_enabled():
            yield
            return
        from .engine import zero3_init

        with zero3_init(self):
            yield


def _find_node(config: dict[str, Any], key: str) -> tuple[dict[str, Any] | None, str]:
    """The mapping that holds the last part of dotted ``key``, and that part (``None`` when absent)."""
    *parents, last = key.split(".")
    node: Any = config
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return None, last
    return (node, last) if isinstance(node, dict) else (None, last)


def config_view(config: dict[str, Any]) -> HfDeepSpeedConfig:
    """An ``HfDeepSpeedConfig`` over ``config`` itself, not a copy (``accelerate.utils.deepspeed``'s
    class, as Accelerate's ``hf_ds_config`` is; transformers' subclass would register itself
    with transformers on construction, which only ``select`` may do)."""
    view = HfDeepSpeedConfig({})
    view.config = config
    view.set_stage_and_offload()
    return view


class SelectionError(DrivetrainError, NotImplementedError):
    """The active DeepSpeedPlugin was changed other than through the state (Accelerate raises
    NotImplementedError there)."""


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return str(a).strip().lower() == str(b).strip().lower()
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b)
    if _is_number(a) and _is_number(b):
        return float(a) == float(b)
    return a == b


# ------------------------------------------------------------------ placeholders


class DummyOptim:
    """Stands for the optimizer that the DeepSpeed config's ``optimizer`` block defines.

    ``prepare`` builds that optimizer over ``params``; ``lr``, ``weight_decay`` and any other
    keyword fill the block's ``"auto"`` parameters of the same name.
    """

    def __init__(self, params: Any, lr: float = 0.001, weight_decay: float = 0, **kwargs: Any) -> None:
        self.params = list(params) if not isinstance(params, (list, tuple)) else params
        self.lr = lr
        self.weight_decay = weight_decay
        self.kwargs = kwargs


class DummyScheduler:
    """Stands for the scheduler that the DeepSpeed config's ``scheduler`` block defines.

    Args:
        optimizer: the (dummy) optimizer it drives.
        total_num_steps: fills ``total_num_steps`` (counted like a scheduler of one process:
            divided by the number of processes unless batches are split).
        warmup_num_steps: fills ``warmup_num_steps``.
        lr_scheduler_callable: ``callable(optimizer) -> scheduler``, used when the config has
            no ``scheduler`` block.
    """

    def __init__(self, optimizer: Any, total_num_steps: int | None = None, warmup_num_steps: int = 0,
                 lr_scheduler_callable: Any = None, **kwargs: Any) -> None:
        self.optimizer = optimizer
        self.total_num_steps = total_num_steps
        self.warmup_num_steps = warmup_num_steps
        self.lr_scheduler_callable = lr_scheduler_callable
        self.kwargs = kwargs


def get_active_deepspeed_plugin(state: Any) -> DeepSpeedPlugin:
    """The ``DeepSpeedPlugin`` in use (the one ``select_deepspeed_plugin`` chose last)."""
    plugin = getattr(state, "deepspeed_plugin", None)
    if plugin is None:
        raise ValueError("DeepSpeed is not the strategy of this run; select it with "
                         "Accelerator(deepspeed_plugin=...) or distributed_type: DEEPSPEED")
    return plugin


def launch_options_environment(values: Mapping[str, Any]) -> dict[str, str]:
    """Variables that carry option ``values`` (``{"zero_stage": 3}``) to a launched process."""
    env: dict[str, str] = {}
    for name, value in values.items():
        if value is None or name not in OPTIONS:
            continue
        text = environment.as_env_value(value)
        variable = OPTIONS[name][0]
        env[variable] = text
        env[environment.own_name(variable)] = text
    return env
