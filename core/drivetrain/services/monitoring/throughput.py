"""What a batch holds (samples, tokens) and the model FLOPs of one step, counted once.

Samples are a batch's batch size (:func:`find_batch_size`: its first leaf tensor's first
dimension); tokens are the ones ``attention_mask`` marks (its sum), else every position of
``input_ids`` (its number of elements); a batch with neither counts no tokens. A mask on a device is summed there and read
only when a window is logged, so counting never waits for the device.

FLOPs are torch's own count (``torch.utils.flop_counter.FlopCounterMode``) of everything the
process runs from the first forward of a prepared model to the first optimizer step: the
forward and backward of every micro-batch of that step, the loss included. Only operations
torch's counter knows are counted (matrix products, convolutions, attention), which is
where a model's FLOPs are; the optimizer step is not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ...tensors.nested import ignorant_find_batch_size


def samples_in(batch: Any) -> int | None:
    """The number of samples in ``batch`` (its batch size, as ``gather_for_metrics`` and the
    Trainer read it); ``None`` when it has none."""
    return ignorant_find_batch_size(batch)


def tokens_in(batch: Any) -> int | torch.Tensor | None:
    """The tokens of ``batch``: a number, a tensor still on its device, or ``None`` (no token field)."""
    if not isinstance(batch, Mapping):
        return None
    mask = batch.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        total = mask.sum()
        return int(total) if total.device.type == "cpu" else total
    ids = batch.get("input_ids")
    if isinstance(ids, torch.Tensor):
        return ids.numel()
    return None


class FirstStepFlops:
    """Counts the FLOPs of the first step: started by the first forward of a watched model,
    stopped at the first optimizer step; the hooks go away once it has started."""

    def __init__(self) -> None:
        self.flops: int | None = None
        self._mode: Any = None
        self._hooks: list[Any] = []

    def watch(self, model: torch.nn.Module) -> None:
        if self.flops is None and self._mode is None:
            self._hooks.append(model.register_forward_pre_hook(self._on_first_forward))

    def _on_first_forward(self, module: Any, args: Any) -> None:
        self._remove_hooks()
        if self._mode is None and self.flops is None:
            from torch.utils.flop_counter import FlopCounterMode

            self._mode = FlopCounterMode(display=False)
            self._mode.__enter__()

    @property
    def counting(self) -> bool:
        return self._mode is not None

    def stop(self) -> None:
        """End the count (at the first optimizer step, or when the run ends first)."""
        mode, self._mode = self._mode, None
        if mode is not None:
            mode.__exit__(None, None, None)
            self.flops = int(mode.get_total_flops())
        self._remove_hooks()

    def _remove_hooks(self) -> None:
        hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook.remove()
