"""The loss-spike guard of ``MonitorKwargs``.

``accelerator.backward(loss)`` hands each loss over (undivided by gradient accumulation,
with the batch it came from); the guard reads them when the next optimizer step is about to
be taken, all at once (one wait for the device, after the backward is queued, so the device
is never left idle by it). A loss is a spike when it is not finite, or when it is above
``spike_factor`` times the median of the last ``spike_window`` losses that were not spikes
(judged once that history holds :data:`MIN_HISTORY` losses or the whole window, whichever
is fewer). Every finite loss enters the history, spikes included: the median shrugs off a few
of them, and leaving them out would let noisy losses drag the median down until every loss
looks like a spike; a loss that stays high for half the window is the new level.

With ``on_spike="skip"`` or ``"stop"`` the processes agree before acting: each process's
verdict is combined by a maximum over the run's collectives, so every process skips (or
stops at) the same step and DDP replicas never diverge. ``"warn"`` only reports, on the
process that saw the spike.
"""

from __future__ import annotations

import collections
import logging
import math
import statistics
from dataclasses import dataclass
from typing import Any

import torch

from ...runtime.collectives import blocking_flag_max

logger = logging.getLogger("drivetrain.monitoring")

#: Losses the history must hold before a spike is judged against its median.
MIN_HISTORY = 5
#: Losses kept while no optimizer step reads them (a strategy that steps inside backward).
MAX_PENDING = 1024


@dataclass(frozen=True)
class Spike:
    step: int
    epoch: int | None
    batch: int | None
    loss: float
    median: float | None
    history: int  # how many losses the median was taken over

    def describe(self, factor: float) -> str:
        where = (f"batch {self.batch} of epoch {self.epoch}" if self.batch is not None
                 else "a batch not drawn from a prepared loader")
        if self.median is None:
            why = "is not finite"
        else:
            why = f"is above {factor:g} x the running median {self.median:.6g} of the last {self.history} losses"
        return f"loss spike at step {self.step} ({where}): loss {self.loss:.6g} {why}"


class SpikeGuard:
    """One run's loss history, the losses waiting for the next step, and the verdict."""

    def __init__(self, factor: float, window: int, action: str) -> None:
        self.factor = factor
        self.window = window
        self.action = action
        self.history: collections.deque[float] = collections.deque(maxlen=window)
        self.pending: collections.deque[tuple[torch.Tensor, int | None, int | None]] = collections.deque(
            maxlen=MAX_PENDING)
        self.spikes: list[Spike] = []  # the ones this process found
        self.flagged_steps: list[int] = []  # the steps acted on (every process agrees on them but under "warn")

    def saw(self, loss: Any, position: tuple[int | None, int | None]) -> None:
        """A loss given to backward, with the (epoch, batch index) of the batch it came from."""
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            self.pending.append((loss.detach(), *position))

    def judge(self, step: int) -> list[Spike]:
        """The spikes among the losses seen since the last step (all read with one wait)."""
        if not self.pending:
            return []
        pending, self.pending = list(self.pending), collections.deque(maxlen=MAX_PENDING)
        if len(pending) == 1:  # the common step: one loss, one read
            values = [pending[0][0].item()]
        else:
            values = torch.stack([loss.float().reshape(()) for loss, _, _ in pending]).tolist()
        found = []
        for value, (_, epoch, batch) in zip(values, pending):
            median = statistics.median(self.history) if len(self.history) >= min(MIN_HISTORY, self.window) else None
            if not math.isfinite(value):
                found.append(Spike(step, epoch, batch, value, None, len(self.history)))
                continue
            if median is not None and value > self.factor * median:
                found.append(Spike(step, epoch, batch, value, median, len(self.history)))
            self.history.append(value)
        self.spikes.extend(found)
        return found

    def agreed(self, found: list[Spike], collectives: Any, device: Any) -> bool:
        """Whether any process found a spike at this step (collective under skip and stop)."""
        local = 1 if found else 0
        if self.action == "warn" or collectives.world_size <= 1:
            return bool(local)
        return bool(blocking_flag_max(collectives, local, device)())

    def report(self, found: list[Spike], agreed: bool, step: int) -> None:
        self.flagged_steps.append(step)
        consequence = {"warn": "", "skip": "; the optimizer step is skipped",
                       "stop": "; the run stops with a checkpoint of the last good state"}[self.action]
        for spike in found:
            logger.warning("%s%s", spike.describe(self.factor), consequence)
        if agreed and not found and self.action != "warn":
            logger.warning("step %d: another process saw a loss spike%s", step, consequence)
