"""Megatron-LM training through drivetrain: what runs, and what this machine must have.

Two libraries are involved. ``megatron-core`` (on PyPI, ``drivetrain[megatron]``) holds the
parallel state (tensor, pipeline and data-parallel groups) and the parallel layers; its groups
and its ``ColumnParallelLinear``/``RowParallelLinear`` run on CPU processes over gloo. Its GPT,
BERT and T5 models do not: attention takes its workspace from
``megatron.core.utils.GlobalMemoryBuffer``, allocated with ``torch.cuda.current_device()``, and
``tensor_parallel.model_parallel_cuda_manual_seed`` seeds the model-parallel RNG tracker on
CUDA. The train steps, the engine and the argument handling Accelerate builds on (``get_args``,
``initialize_megatron``, the schedules of ``megatron.training``) are Megatron-LM's training
package, which is not published on PyPI: it comes from the Megatron-LM source tree.

The helpers over data-parallel groups work wherever megatron-core's groups exist.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from drivetrain.plugin_api import ConfigError

CORE_MODULE = "megatron.core"
TRAINING_MODULE = "megatron.training"


def _present(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_requirements(device_type: str) -> list[str]:
    """What a Megatron-LM train step needs that this process lacks (empty: all there)."""
    missing = []
    if not _present(CORE_MODULE):
        missing.append("megatron-core (pip install 'drivetrain[megatron]')")
    if not _present(TRAINING_MODULE):
        missing.append("Megatron-LM's training package `megatron.training` (not on PyPI: install Megatron-LM from "
                       "its source tree)")
    if device_type != "cuda":
        missing.append(f"CUDA devices (this run's platform is {device_type!r}; megatron-core's GPT/BERT/T5 attention "
                       "allocates its workspace with torch.cuda.current_device() and seeds its model-parallel RNG "
                       "on CUDA)")
    return missing


def refusal(device_type: str) -> ConfigError | None:
    missing = missing_requirements(device_type)
    if not missing:
        return None
    return ConfigError("the megatron_lm strategy needs " + "; ".join(missing) + "; use the parallelism_config "
                       "strategy (ParallelismConfig(tp_size=...)) for tensor parallelism without Megatron-LM")


def _require(what: str) -> None:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    error = refusal(device)
    if error is not None:
        raise ConfigError(f"{what}: {error}")
    raise ConfigError(f"{what} drives Megatron-LM's own training loop, which drivetrain does not run yet; "
                      "train with megatron.training directly")


class MegatronLMDummyDataLoader:
    """Stands for the data loader Megatron-LM builds from its dataset arguments
    (``data_path``, ``seq_length``, ``splits_string``, ...), which are kept as given."""

    def __init__(self, **dataset_kwargs: Any) -> None:
        self.dataset_args = dict(dataset_kwargs)

    def set_megatron_data_args(self) -> dict[str, Any]:
        return dict(self.dataset_args)


class MegatronLMDummyScheduler:
    """Stands for the learning-rate schedule Megatron-LM builds from ``MegatronLMPlugin``'s
    ``lr_decay_*``/``lr_warmup_*`` options."""

    def __init__(self, optimizer: Any, total_num_steps: int | None = None, warmup_num_steps: int = 0,
                 **kwargs: Any) -> None:
        self.optimizer = optimizer
        self.total_num_steps = total_num_steps
        self.warmup_num_steps = warmup_num_steps
        self.kwargs = kwargs


class AbstractTrainStep:
    """A Megatron-LM train step: builds the batch, the forward and the loss of one model kind."""

    name = "AbstractTrainStep"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _require(type(self).__name__)


class GPTTrainStep(AbstractTrainStep):
    """The train step of a GPT (decoder-only) model."""


class BertTrainStep(AbstractTrainStep):
    """The train step of a BERT (encoder) model."""


class T5TrainStep(AbstractTrainStep):
    """The train step of a T5 (encoder-decoder) model."""


class MegatronEngine:
    """The model, optimizer and schedule of a Megatron-LM run, stepped by Megatron's schedules."""

    def __init__(self, accelerator: Any, model: Any, optimizer: Any, scheduler: Any) -> None:
        _require("MegatronEngine")


def _data_parallel_group() -> Any:
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        raise ConfigError("megatron-core's parallel groups are not initialised; call "
                          "megatron.core.parallel_state.initialize_model_parallel(...) first")
    return parallel_state.get_data_parallel_group()


def avg_losses_across_data_parallel_group(losses: list[Any]) -> Any:
    """The mean of each loss over the data-parallel processes (one tensor, one entry per loss)."""
    import torch
    import torch.distributed as dist

    stacked = torch.cat([loss.detach().clone().view(1) for loss in losses])
    group = _data_parallel_group()
    dist.all_reduce(stacked, group=group)
    return stacked / dist.get_world_size(group=group)


def gather_across_data_parallel_groups(tensor: Any) -> Any:
    """``tensor`` (or a nested structure of tensors) from every data-parallel process,
    concatenated along the first dimension."""
    import torch
    import torch.distributed as dist

    from drivetrain.plugin_api import recursively_apply

    group = _data_parallel_group()

    def gather(item: torch.Tensor) -> torch.Tensor:
        item = item.contiguous()
        if item.ndim == 0:
            item = item.view(1)
        parts = [torch.empty_like(item) for _ in range(dist.get_world_size(group=group))]
        dist.all_gather(parts, item, group=group)
        return torch.cat(parts, dim=0)

    return recursively_apply(gather, tensor, error_on_other_type=True)


def is_megatron_lm_available() -> bool:
    """Accelerate's probe: Megatron-LM is requested (``ACCELERATE_USE_MEGATRON_LM``), megatron-core
    0.8 or newer is installed, and Megatron-LM's training package can be imported."""
    from drivetrain.plugin_api import environment, is_package_available

    if not environment.read_bool("USE_MEGATRON_LM"):
        return False
    if not is_package_available("megatron.core", "megatron-core", "0.8"):
        return False
    return _present(TRAINING_MODULE)
