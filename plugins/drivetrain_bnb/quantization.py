"""Replacing a model's linear layers by bitsandbytes' quantised ones, then loading weights.

Works wherever bitsandbytes runs: its CPU backend (bitsandbytes >= 0.45 quantises 8-bit and
4-bit layers on the CPU) or an accelerator it supports.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from drivetrain.plugin_api import ConfigError, PluginSelectionError

logger = logging.getLogger(__name__)

_INSTALL = "pip install 'drivetrain[bnb]'"


def is_bnb_available(min_version: str | None = None) -> bool:
    if importlib.util.find_spec("bitsandbytes") is None:
        return False
    if min_version is None:
        return True
    from packaging.version import Version

    return Version(importlib.metadata.version("bitsandbytes")) >= Version(min_version)


def is_8bit_bnb_available() -> bool:
    return is_bnb_available("0.37.2")


def is_4bit_bnb_available() -> bool:
    return is_bnb_available("0.39.0")


def is_bitsandbytes_multi_backend_available() -> bool:
    """Whether the installed bitsandbytes has backends besides CUDA (its CPU one, say)."""
    return is_bnb_available("0.45.0")


def _bnb() -> Any:
    try:
        import bitsandbytes
    except ImportError:
        raise PluginSelectionError(f"quantised loading needs bitsandbytes: {_INSTALL}") from None
    return bitsandbytes


_DTYPES = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16, "float16": torch.float16,
           "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}


@dataclass
class BnbQuantizationConfig:
    """How to quantise: 8-bit (LLM.int8) or 4-bit (fp4 / nf4), which modules to leave alone."""

    load_in_8bit: bool = False
    llm_int8_threshold: float = 6.0
    load_in_4bit: bool = False
    bnb_4bit_quant_type: str = "fp4"
    bnb_4bit_use_double_quant: bool = False
    bnb_4bit_compute_dtype: str | torch.dtype = "fp32"
    torch_dtype: torch.dtype | None = None
    skip_modules: list[str] | None = None
    keep_in_fp32_modules: list[str] | None = field(default=None)

    def __post_init__(self) -> None:
        if self.load_in_8bit == self.load_in_4bit:
            raise ConfigError("BnbQuantizationConfig: set exactly one of load_in_8bit and load_in_4bit")
        if self.bnb_4bit_quant_type not in ("fp4", "nf4"):
            raise ConfigError(f"bnb_4bit_quant_type={self.bnb_4bit_quant_type!r}: use 'fp4' or 'nf4'")
        if isinstance(self.bnb_4bit_compute_dtype, str):
            if self.bnb_4bit_compute_dtype not in _DTYPES:
                raise ConfigError(f"bnb_4bit_compute_dtype={self.bnb_4bit_compute_dtype!r}: use fp32, fp16 or bf16")
            self.bnb_4bit_compute_dtype = _DTYPES[self.bnb_4bit_compute_dtype]
        if self.torch_dtype is None:
            self.torch_dtype = torch.float16 if self.load_in_8bit else torch.float32
        self.skip_modules = list(self.skip_modules or [])
        self.keep_in_fp32_modules = list(self.keep_in_fp32_modules or [])


def has_4bit_bnb_layers(model: nn.Module) -> bool:
    """Whether ``model`` has bitsandbytes 4-bit linear layers."""
    if not is_bnb_available():
        return False
    bnb = _bnb()
    return any(isinstance(module, bnb.nn.Linear4bit) for module in model.modules())


def _skipped(name: str, skip: list[str]) -> bool:
    return any(name == s or name.startswith(f"{s}.") or name.endswith(f".{s}") for s in skip)


def _default_skips(model: nn.Module) -> list[str]:
    """The output layer (often tied to the input embeddings) stays in full precision."""
    output = getattr(model, "get_output_embeddings", lambda: None)()
    names = [name for name, module in model.named_modules() if module is output] if output is not None else []
    if not names:
        linears = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
        names = linears[-1:]
    return names


def _quantised_linear(linear: nn.Linear, config: BnbQuantizationConfig, device: torch.device) -> nn.Module:
    bnb = _bnb()
    bias = linear.bias is not None
    weight = linear.weight.detach()
    if config.load_in_8bit:
        layer = bnb.nn.Linear8bitLt(linear.in_features, linear.out_features, bias=bias, has_fp16_weights=False,
                                    threshold=config.llm_int8_threshold)
        layer.weight = bnb.nn.Int8Params(weight.to(config.torch_dtype), requires_grad=False, has_fp16_weights=False)
    else:
        layer = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=bias,
                                  compute_dtype=config.bnb_4bit_compute_dtype,
                                  compress_statistics=config.bnb_4bit_use_double_quant,
                                  quant_type=config.bnb_4bit_quant_type)
        layer.weight = bnb.nn.Params4bit(weight.to(config.torch_dtype), requires_grad=False,
                                         compress_statistics=config.bnb_4bit_use_double_quant,
                                         quant_type=config.bnb_4bit_quant_type)
    if bias:
        layer.bias = nn.Parameter(linear.bias.detach().to(config.torch_dtype), requires_grad=False)
    return layer.to(device)  # bitsandbytes quantises while moving the weights to the device


def load_and_quantize_model(model: nn.Module, bnb_quantization_config: BnbQuantizationConfig,
                            weights_location: str | os.PathLike | None = None, device_map: Any = None,
                            no_split_module_classes: list[str] | None = None,
                            max_memory: dict[int | str, int | str] | None = None,
                            offload_folder: str | os.PathLike | None = None,
                            offload_state_dict: bool = False) -> nn.Module:
    """Quantise ``model``'s linear layers (8-bit or 4-bit) and load its weights.

    ``model`` is either loaded already, or built under ``init_empty_weights`` with the weights
    in ``weights_location`` (a file or folder drivetrain can load). Every ``nn.Linear`` is
    replaced, except ``skip_modules`` (by default the output layer) and
    ``keep_in_fp32_modules``. ``device_map`` may name one device, ``"auto"`` or a dict without
    disk; quantised layers are not offloaded.
    """
    from drivetrain.plugin_api import dispatch_model, load_checkpoint_in_model, resolve_device, resolve_device_map

    config = bnb_quantization_config
    _bnb()
    empty = any(p.device.type == "meta" for p in model.parameters())
    if empty:
        if weights_location is None:
            raise ConfigError("the model is empty (meta device): pass weights_location, the checkpoint to load")
        load_checkpoint_in_model(model, weights_location, dtype=config.torch_dtype,
                                 keep_in_fp32_modules=config.keep_in_fp32_modules, offload_state_dict=offload_state_dict)
    elif weights_location is not None:
        load_checkpoint_in_model(model, weights_location, dtype=config.torch_dtype,
                                 keep_in_fp32_modules=config.keep_in_fp32_modules)
    device_map = resolve_device_map(model, device_map, max_memory, no_split_module_classes, config.torch_dtype)
    if device_map and any(str(v) == "disk" for v in device_map.values()):
        raise ConfigError("quantised layers cannot be offloaded to disk; give max_memory that fits the quantised "
                          "model, or load without quantisation")
    skip = (config.skip_modules or _default_skips(model)) + list(config.keep_in_fp32_modules)
    replaced = 0
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if isinstance(child, nn.Linear) and not _skipped(full, skip):
                device = _device_for(full, device_map)
                setattr(module, child_name, _quantised_linear(child, config, resolve_device(device)))
                replaced += 1
    if replaced == 0:
        logger.warning("no linear layer was quantised (skip_modules=%s)", skip)
    for name in config.keep_in_fp32_modules:
        for module_name, module in model.named_modules():
            if _skipped(module_name, [name]):
                module.to(torch.float32)
    model.is_loaded_in_8bit = config.load_in_8bit
    model.is_loaded_in_4bit = config.load_in_4bit
    if device_map:
        dispatch_model(model, device_map)
    return model


def _device_for(name: str, device_map: dict[str, Any] | None) -> Any:
    if not device_map:
        return "cpu"
    probe = name
    while True:
        if probe in device_map:
            return device_map[probe]
        if not probe:
            return "cpu"
        probe = probe.rpartition(".")[0]
