"""Accelerate's Megatron-LM helpers (``accelerate.utils.megatron_lm_*`` and friends).

Two kinds live here. What stands on its own is real: the registry of model-config parsers
(``add_model_config_to_megatron_parser``) and the optimizer and scheduler wrappers, whose
``step`` is left to Megatron's train step (it steps the optimizer and the learning-rate
schedule itself, inside its forward-backward schedule). What drives Megatron-LM's own
training package (``megatron.training``: its global arguments, ``initialize_megatron``,
``setup_model_and_optimizer``, its data iterators) refuses with the reason this machine
cannot run it, the same reason ``MegatronEngine`` gives.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from drivetrain.plugin_api import AcceleratedOptimizer, AcceleratedScheduler, ConfigError

from .engine import _require

#: model type (``config.model_type`` of a transformers model: "gpt2", "bert", "t5", ...) ->
#: the function that copies that model's config into ``MegatronLMPlugin.megatron_lm_default_args``.
MODEL_CONFIGS_TO_MEGATRON_PARSERS: dict[str, Callable[..., Any]] = {}


def add_model_config_to_megatron_parser(model_type: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the config parser of ``model_type``.

    The function is called as ``parser(megatron_lm_plugin, model, batch_data)`` when a model of
    that type is prepared for Megatron-LM; it is returned unchanged, so it can still be called
    directly. Registering a type twice replaces the earlier parser (a user may override a
    built-in one).
    """
    if not isinstance(model_type, str) or not model_type.strip():
        raise ConfigError(f"add_model_config_to_megatron_parser takes a model type name, not {model_type!r}")

    def register(parser: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(parser):
            raise ConfigError(f"add_model_config_to_megatron_parser({model_type!r}) decorates a function, "
                              f"not {type(parser).__name__}")
        MODEL_CONFIGS_TO_MEGATRON_PARSERS[model_type] = parser
        return parser

    return register


def megatron_parser_for(model_type: str) -> Callable[..., Any]:
    """The parser registered for ``model_type``."""
    try:
        return MODEL_CONFIGS_TO_MEGATRON_PARSERS[model_type]
    except KeyError:
        known = sorted(MODEL_CONFIGS_TO_MEGATRON_PARSERS) or "none"
        raise ConfigError(f"no Megatron-LM config parser for model type {model_type!r} (registered: {known}); "
                          "register one with @add_model_config_to_megatron_parser(model_type)") from None


class MegatronLMOptimizerWrapper(AcceleratedOptimizer):
    """The optimizer of a Megatron-LM run: Megatron's train step zeroes gradients and steps it
    inside its schedule, so ``zero_grad`` and ``step`` here leave it alone."""

    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer, device_placement=False, scaler=None)

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        return None  # done by Megatron's train step

    def step(self, closure: Any = None) -> None:
        return None  # done by Megatron's train step

    @property
    def step_was_skipped(self) -> bool:
        """Whether Megatron skipped the last step (its optimizer's ``skipped_iter``, set when
        the loss scaler found an overflow)."""
        return bool(getattr(self.optimizer, "skipped_iter", False))


class MegatronLMSchedulerWrapper(AcceleratedScheduler):
    """The learning-rate schedule of a Megatron-LM run, stepped by Megatron's train step."""

    def __init__(self, scheduler: Any, optimizers: Sequence[Any] | Any) -> None:
        super().__init__(scheduler, optimizers)

    def step(self, *args: Any, **kwargs: Any) -> None:
        return None  # done by Megatron's train step


def megatron_lm_initialize(accelerator: Any, extra_args_provider: Callable[..., Any] | None = None,
                           args_defaults: dict[str, Any] | None = None) -> None:
    """Megatron-LM's ``initialize_megatron`` with the plugin's arguments."""
    _require("megatron_lm_initialize")


def megatron_lm_prepare_data_loader(accelerator: Any, dataloader: Any) -> Any:
    """The data loader (or Megatron's train/valid/test iterators) sharded over Megatron's
    data-parallel group."""
    _require("megatron_lm_prepare_data_loader")


def megatron_lm_prepare_model_optimizer_scheduler(accelerator: Any) -> Any:
    """Megatron-LM's model, optimizer and schedule (``setup_model_and_optimizer``)."""
    _require("megatron_lm_prepare_model_optimizer_scheduler")


def megatron_lm_prepare_optimizer(accelerator: Any, model: Any) -> Any:
    """Megatron's optimizer (``get_megatron_optimizer``) for ``model``."""
    _require("megatron_lm_prepare_optimizer")


def megatron_lm_prepare_scheduler(accelerator: Any, optimizer: Any, scheduler: Any) -> Any:
    """Megatron's learning-rate schedule (``get_optimizer_param_scheduler``)."""
    _require("megatron_lm_prepare_scheduler")
