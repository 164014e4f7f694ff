"""The names of the ``drivetrain.utils`` submodules kept for Accelerate's import paths only.

Accelerate defines some helpers in backend modules (``accelerate.utils.bnb``,
``accelerate.utils.megatron_lm``...) and re-exports them from ``accelerate.utils``. drivetrain
offers them from ``drivetrain.utils`` (most contributed by the plugin owning the backend); each
such submodule serves the same objects at the old path, so ``from accelerate.utils.bnb import
load_and_quantize_model`` and ``from accelerate.utils import load_and_quantize_model`` agree.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from ..kernel.contributed import contributed_getattr

# Accelerate 1.15's module -> the names it defines that accelerate.utils re-exports
ACCELERATE_NAMES: dict[str, tuple[str, ...]] = {
    "ao": ("convert_model_to_fp8_ao", "filter_first_and_last_linear_layers", "has_ao_layers"),
    "bnb": ("has_4bit_bnb_layers", "load_and_quantize_model"),
    "megatron_lm": ("AbstractTrainStep", "BertTrainStep", "GPTTrainStep", "MegatronEngine", "MegatronLMDummyDataLoader",
                    "MegatronLMDummyScheduler", "MegatronLMOptimizerWrapper", "MegatronLMSchedulerWrapper",
                    "T5TrainStep", "avg_losses_across_data_parallel_group", "gather_across_data_parallel_groups"),
    "torch_xla": ("install_xla",),
    "transformer_engine": ("apply_fp8_autowrap", "contextual_fp8_autocast", "convert_model",
                           "has_transformer_engine_layers"),
}


def module_namespace(module_name: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``drivetrain.utils.<name>``: Accelerate's names from
    ``drivetrain.utils``, then what plugins contribute under the module's own dotted key."""
    names = ACCELERATE_NAMES[module_name.rpartition(".")[2]]
    contributed = contributed_getattr(module_name)

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module("drivetrain.utils"), name)
        return contributed(name)

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__
