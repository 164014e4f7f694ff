"""The ``megatron_lm`` strategy's role object (``run.strategy`` while Megatron-LM is the run's
strategy, ``StrategySpec(hooks=...)``): the run's ``MegatronLMPlugin`` and the run hooks.

Cheap to import (no torch, no Megatron).
"""

from __future__ import annotations

from typing import Any

from drivetrain.plugin_api import ConfigError, Strategy, hookimpl

from .options import MegatronLMPlugin

OPTIONS_ARGUMENT = "megatron_lm_plugin"


class MegatronStrategy(Strategy):
    """Megatron-LM as the run's strategy: options resolved and checked for each ``Accelerator``;
    refused, naming what is missing, where Megatron-LM cannot run.

    Attributes:
        options: the run's :class:`MegatronLMPlugin` (``None`` until configured).
    """

    def __init__(self, run: Any, arguments: Any = None) -> None:
        super().__init__(run, arguments)
        self.options: MegatronLMPlugin | None = None

    def configure(self, run: Any) -> MegatronLMPlugin:
        from .engine import refusal

        options = self.arguments.get(OPTIONS_ARGUMENT) or MegatronLMPlugin()
        if not isinstance(options, MegatronLMPlugin):
            raise ConfigError(f"megatron_lm_plugin must be a MegatronLMPlugin, not {type(options).__name__}")
        options.data_parallel_degree(run.state.num_processes)
        error = refusal(run.platform.device_type)
        if error is not None:
            raise error
        self.arguments[OPTIONS_ARGUMENT] = self.options = options
        return options

    @hookimpl
    def drivetrain_configure_run(self, run):
        self.configure(run)
        return None  # Accelerate's Megatron names are contributed as public names
