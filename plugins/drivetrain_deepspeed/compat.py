"""Accelerate's DeepSpeed helpers at ``drivetrain.utils``: the probe, ``GatheredParameters``,
``HfDeepSpeedConfig``, ``DeepSpeedEngineWrapper`` and ``deepspeed_required``."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
from typing import Any, Callable, Iterator

from drivetrain.plugin_api import ConfigError


def is_deepspeed_available() -> bool:
    """Whether DeepSpeed is installed (imports nothing)."""
    return importlib.util.find_spec("deepspeed") is not None


def deepspeed_required(function: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: calling ``function`` without DeepSpeed installed fails with the install command."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not is_deepspeed_available():
            raise ConfigError(f"{function.__name__} needs DeepSpeed: pip install 'drivetrain[deepspeed]'")
        return function(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def GatheredParameters(params: Any, modifier_rank: int | None = None, fwd_module: Any = None,
                       enabled: bool = True) -> Iterator[None]:
    """Gather ZeRO-3 partitioned ``params`` for the block (DeepSpeed's context manager); with
    unpartitioned parameters, or without DeepSpeed, there is nothing to gather."""
    partitioned = enabled and is_deepspeed_available() and any(
        hasattr(p, "ds_id") for p in (params if isinstance(params, (list, tuple)) else [params]))
    if not partitioned:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(params, modifier_rank=modifier_rank, fwd_module=fwd_module,
                                           enabled=enabled):
        yield


class HfDeepSpeedConfig:
    """A DeepSpeed config (dict or JSON file) with questions libraries ask of it: ZeRO stage, offload."""

    def __init__(self, config_file_or_dict: dict[str, Any] | str | os.PathLike) -> None:
        if isinstance(config_file_or_dict, dict):
            config = dict(config_file_or_dict)
        elif os.path.exists(config_file_or_dict):
            with open(config_file_or_dict, encoding="utf-8") as handle:
                config = json.load(handle)
        else:
            raise ConfigError(f"{config_file_or_dict}: not a DeepSpeed config dict or an existing JSON file")
        self.config = config
        self.set_stage_and_offload()

    def set_stage_and_offload(self) -> None:
        """Read the ZeRO stage and offload answers again from ``config`` (after it changed)."""
        self._stage = int(self.get_value("zero_optimization.stage", -1))
        self._offload = any(self.get_value(f"zero_optimization.{key}.device") in ("cpu", "nvme")
                            for key in ("offload_param", "offload_optimizer"))

    def find_config_node(self, ds_key_long: str) -> tuple[dict[str, Any] | None, str]:
        node: Any = self.config
        *parents, key = ds_key_long.split(".")
        for parent in parents:
            node = node.get(parent) if isinstance(node, dict) else None
            if node is None:
                return None, key
        return node, key

    def get_value(self, ds_key_long: str, default: Any = None) -> Any:
        node, key = self.find_config_node(ds_key_long)
        return default if node is None else node.get(key, default)

    def del_config_sub_tree(self, ds_key_long: str, must_exist: bool = False) -> None:
        node, key = self.find_config_node(ds_key_long)
        if node is None or key not in node:
            if must_exist:
                raise ConfigError(f"{ds_key_long} is not in the DeepSpeed config")
            return
        del node[key]

    def is_true(self, ds_key_long: str) -> bool:
        return bool(self.get_value(ds_key_long)) is True

    def is_false(self, ds_key_long: str) -> bool:
        value = self.get_value(ds_key_long)
        return value is not None and not bool(value)

    def is_zero2(self) -> bool:
        return self._stage == 2

    def is_zero3(self) -> bool:
        return self._stage == 3

    def is_offload(self) -> bool:
        return self._offload


class DeepSpeedEngineWrapper:
    """Runs backward and the optimizer step through a DeepSpeed engine, as Accelerate's wrapper does."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def backward(self, loss: Any, sync_gradients: bool = True, **kwargs: Any) -> None:
        # the engine decides itself, at its accumulation boundary, whether to synchronise
        self.engine.set_gradient_accumulation_boundary(is_boundary=sync_gradients)
        self.engine.backward(loss, **kwargs)
        if sync_gradients:
            self.engine.step()

    def get_global_grad_norm(self) -> Any:
        return self.engine.get_global_grad_norm()
