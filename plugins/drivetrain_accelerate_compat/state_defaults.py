"""Accelerate's attributes of a backend on ``Accelerator``, ``AcceleratorState`` and
``GradientState``, and what each reads while that backend is not in use.

Declared through ``drivetrain_register_backend_attributes``: the core installs each on its
class, where an active plugin's run extension answers it first (the fsdp strategy's
``is_fsdp2``, an fp8 precision's ``fp8_enabled``). So a script that asks
``state.deepspeed_plugins`` or ``accelerator.is_fsdp2`` in a run without that strategy gets
Accelerate's answer (``None``, ``False``) instead of an ``AttributeError``.
"""

from __future__ import annotations

from typing import Any, NoReturn

from drivetrain.plugin_api import BackendAttribute, ConfigError


def _deepspeed_not_enabled(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise ConfigError("DeepSpeed is not enabled in this run; build the Accelerator with deepspeed_plugin=... "
                      "(or `drivetrain launch --use_deepspeed`) before selecting a DeepSpeedPlugin")


#: ``AcceleratorState`` attributes of strategies that are not in use, and their values.
ACCELERATOR_STATE: dict[str, Any] = {
    "deepspeed_plugin": None,
    "deepspeed_plugins": None,
    "fsdp_plugin": None,
    "megatron_lm_plugin": None,
    "torch_tp_plugin": None,
    "parallelism_config": None,
    "device_mesh": None,
    "is_fsdp2": False,
    "get_deepspeed_plugin": _deepspeed_not_enabled,
    "select_deepspeed_plugin": _deepspeed_not_enabled,
}

#: ``Accelerator`` attributes of strategies that are not in use, and their values.
ACCELERATOR: dict[str, Any] = {
    "deepspeed_plugin": None,
    "is_fsdp2": False,
    # fp8 members: an active fp8 precision plugin answers them through its run extension.
    "fp8_backend": None,
    "fp8_enabled": False,
    "has_fp8_handler": False,
    "delayed_fp8_autocast": False,
    "fp8_recipe_handler": None,
    "te_recipe_handler": None,
    "msamp_recipe_handler": None,
    "ao_recipe_handler": None,
}

#: ``GradientState`` attributes. ``is_xla_gradients_synced`` is ``False`` until a step sets it
#: on the shared state (then every reader sees the new value), or a strategy that synchronises
#: gradients itself (FSDP) answers it.
GRADIENT_STATE: dict[str, Any] = {
    "is_xla_gradients_synced": False,
}


def declarations() -> list[BackendAttribute]:
    """Every attribute above, as the declarations the core installs."""
    return [BackendAttribute(owner=owner, name=name, unused=value, description=f"Accelerate's {owner}.{name}")
            for owner, table in (("Accelerator", ACCELERATOR), ("AcceleratorState", ACCELERATOR_STATE),
                                 ("GradientState", GRADIENT_STATE))
            for name, value in table.items()]
