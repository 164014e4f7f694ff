"""Fill the ``"auto"`` values of a DeepSpeed config from what ``prepare`` was given.

A DeepSpeed config file may leave values to the training script (Accelerate's convention):
batch sizes, accumulation, clipping, optimizer and scheduler parameters, mixed precision and
a few ZeRO buffer sizes. :func:`fill_auto_values` computes them from :class:`Facts` gathered
from the prepared objects; a value it cannot compute is an error that names the key and how
to provide it. Pure Python: no torch, no deepspeed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from drivetrain.plugin_api import ConfigError

from .options import AUTO, get_key, has_key, set_key

#: DeepSpeed's own defaults for ZeRO-3 keys written "auto" that depend on nothing here.
ZERO3_DEFAULTS = {"stage3_max_live_parameters": 1_000_000_000, "stage3_max_reuse_distance": 1_000_000_000}
#: ZeRO keys computed from the model's hidden size.
HIDDEN_SIZE_KEYS = ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold")
#: gradient_clipping "auto" with no gradient_clipping option (Accelerate's default).
DEFAULT_GRADIENT_CLIPPING = 1.0


@dataclass
class Facts:
    """What ``prepare`` knows that a config may leave ``"auto"``.

    Attributes:
        world_size: processes of the run (DeepSpeed's data-parallel size).
        gradient_accumulation_steps: the ``Accelerator``'s.
        micro_batch_sizes: batch size per process of each prepared data loader.
        is_train_batch_min: take the smallest of those (else the largest).
        mixed_precision: ``"no"``, ``"fp16"`` or ``"bf16"``.
        gradient_clipping: the ``DeepSpeedPlugin``'s option, or ``None``.
        save_16bit_model: the ``zero3_save_16bit_model`` option.
        optimizer_params: values for ``optimizer.params`` (from ``DummyOptim``).
        scheduler_params: values for ``scheduler.params`` (from ``DummyScheduler`` and the
            optimizer's learning rate).
        hidden_size: the model's ``config.hidden_size`` (or largest ``hidden_sizes``), if any.
        model_has_config: whether the model has a ``config`` (for the message when
            ``hidden_size`` is missing).
    """

    world_size: int = 1
    gradient_accumulation_steps: int = 1
    micro_batch_sizes: list[int] = field(default_factory=list)
    is_train_batch_min: bool = True
    mixed_precision: str = "no"
    gradient_clipping: float | None = None
    save_16bit_model: bool = False
    optimizer_params: dict[str, Any] = field(default_factory=dict)
    scheduler_params: dict[str, Any] = field(default_factory=dict)
    hidden_size: int | None = None
    model_has_config: bool = True


def auto_keys(config: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Dotted keys whose value is ``"auto"``, depth first."""
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from auto_keys(value, path + ".")
        elif isinstance(value, str) and value.strip().lower() == AUTO:
            yield path


def _fill(config: dict[str, Any], key: str, value: Any) -> None:
    if value is not None and get_key(config, key) == AUTO:
        set_key(config, key, value)


def fill_precision(config: dict[str, Any], mixed_precision: str, origin: str) -> None:
    """``fp16``/``bf16`` sections for the run's precision, in place.

    ``"auto"`` becomes whether the run uses that precision; the run's precision is added when
    the config does not mention it; a config enabling the other one is an error.
    """
    wanted = mixed_precision if mixed_precision in ("fp16", "bf16") else None
    for name in ("fp16", "bf16"):
        section = config.get(name)
        enabled = section.get("enabled") if isinstance(section, Mapping) else None
        if enabled == AUTO:
            section["enabled"] = name == wanted
        elif enabled is True and wanted is not None and name != wanted:
            raise ConfigError(f"{origin} enables {name} but the run's mixed precision is {wanted}; "
                              f"make them agree (write \"enabled\": \"auto\" to follow the run)")
    if wanted is not None:
        section = config.get(wanted)
        if not isinstance(section, dict):
            config[wanted] = {"enabled": True}
        elif "enabled" not in section:
            section["enabled"] = True


def fill_auto_values(config: Mapping[str, Any], facts: Facts, origin: str = "DeepSpeed config") -> dict[str, Any]:
    """A copy of ``config`` with every ``"auto"`` value computed from ``facts``.

    Raises:
        ConfigError: a value is ``"auto"`` but cannot be computed here; the message names each
            such key and what would provide it.
    """
    filled = copy.deepcopy(dict(config))
    fill_precision(filled, facts.mixed_precision, origin)

    gas = facts.gradient_accumulation_steps
    _fill(filled, "gradient_accumulation_steps", gas)
    if isinstance(filled.get("gradient_accumulation_steps"), int):
        gas = filled["gradient_accumulation_steps"]
    if not has_key(filled, "train_batch_size") and not has_key(filled, "train_micro_batch_size_per_gpu"):
        filled["train_batch_size"] = filled["train_micro_batch_size_per_gpu"] = AUTO
    world = max(int(facts.world_size), 1)
    micro = filled.get("train_micro_batch_size_per_gpu")
    total = filled.get("train_batch_size")
    if micro == AUTO:
        if facts.micro_batch_sizes:
            micro = min(facts.micro_batch_sizes) if facts.is_train_batch_min else max(facts.micro_batch_sizes)
        elif isinstance(total, int) and total % (gas * world) == 0:
            micro = total // (gas * world)
        _fill(filled, "train_micro_batch_size_per_gpu", micro if isinstance(micro, int) else None)
    micro = filled.get("train_micro_batch_size_per_gpu")
    if total == AUTO and isinstance(micro, int):
        filled["train_batch_size"] = micro * gas * world

    _fill(filled, "gradient_clipping",
          facts.gradient_clipping if facts.gradient_clipping is not None else DEFAULT_GRADIENT_CLIPPING)

    zero = filled.get("zero_optimization")
    if isinstance(zero, dict):
        _fill(filled, "zero_optimization.stage3_gather_16bit_weights_on_model_save", bool(facts.save_16bit_model))
        for key, value in ZERO3_DEFAULTS.items():
            _fill(filled, f"zero_optimization.{key}", value)
        size = facts.hidden_size
        if size:
            _fill(filled, "zero_optimization.reduce_bucket_size", size * size)
            _fill(filled, "zero_optimization.stage3_prefetch_bucket_size", int(0.9 * size * size))
            _fill(filled, "zero_optimization.stage3_param_persistence_threshold", 10 * size)

    for block, values in (("optimizer", facts.optimizer_params), ("scheduler", facts.scheduler_params)):
        params = get_key(filled, f"{block}.params")
        if isinstance(params, dict):
            for key, value in values.items():
                _fill(filled, f"{block}.params.{key}", value)

    remaining = list(auto_keys(filled))
    if remaining:
        problems = "; ".join(f"{key} ({_hint(key, facts)})" for key in remaining)
        raise ConfigError(f"{origin}: cannot fill \"auto\" for {problems}")
    return filled


def _hint(key: str, facts: Facts) -> str:
    last = key.rsplit(".", 1)[-1]
    if key in ("train_micro_batch_size_per_gpu", "train_batch_size"):
        return "pass a DataLoader to the same prepare() call, or set a number"
    if last in HIDDEN_SIZE_KEYS:
        # Accelerate's words, which scripts and tests match on
        if not facts.model_has_config:
            return "Can't find `model.config` entry to read hidden_size from; set a number"
        return "Can find neither `model.config.hidden_size` nor `model.config.hidden_sizes`; set a number"
    if key.startswith("optimizer.params."):
        return f"give {last}= to DummyOptim(...), or set a number"
    if key.startswith("scheduler.params."):
        return f"give {last}= to DummyScheduler(...), or set a number"
    return "drivetrain fills only the keys listed in docs/deepspeed.md; set a value"
