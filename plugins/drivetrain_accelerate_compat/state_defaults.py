"""What Accelerate's state attributes of a backend read while that backend is not in use.

Named by ``drivetrain_fallback_names`` under ``state.AcceleratorState.<name>``,
``state.GradientState.<name>`` and ``accelerator.Accelerator.<name>``: those classes read them only when neither they nor an
active plugin's run extension has the attribute, so a script that asks
``state.deepspeed_plugins`` or ``state.is_fsdp2`` in a run without that strategy gets
Accelerate's answer (``None``, ``False``) instead of an ``AttributeError``.
"""

from __future__ import annotations

from typing import Any, NoReturn

from drivetrain.plugin_api import ConfigError

#: ``AcceleratorState`` attributes of strategies that are not in use, and their values.
ACCELERATOR_STATE = {
    "deepspeed_plugin": None,
    "deepspeed_plugins": None,
    "fsdp_plugin": None,
    "megatron_lm_plugin": None,
    "torch_tp_plugin": None,
    "parallelism_config": None,
    "device_mesh": None,
    "is_fsdp2": False,
}

#: ``Accelerator`` attributes of strategies that are not in use, and their values.
ACCELERATOR = {
    "deepspeed_plugin": None,
    "parallelism_config": None,
    "torch_device_mesh": None,
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

#: ``GradientState`` attributes no built-in plugin sets yet. ``is_xla_gradients_synced`` is
#: ``False`` until a step sets it on the shared state (then every reader sees the new value).
GRADIENT_STATE = {
    "is_xla_gradients_synced": False,
}


def _deepspeed_not_enabled(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise ConfigError("DeepSpeed is not enabled in this run; build the Accelerator with deepspeed_plugin=... "
                      "(or `drivetrain launch --use_deepspeed`) before selecting a DeepSpeedPlugin")


get_deepspeed_plugin = _deepspeed_not_enabled
select_deepspeed_plugin = _deepspeed_not_enabled


def __getattr__(name: str) -> Any:
    for table in (ACCELERATOR_STATE, GRADIENT_STATE, ACCELERATOR):
        if name in table:
            return table[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
