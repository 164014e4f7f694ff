"""The scheduler wrapper: steps with the optimizer, as often as Accelerate does."""

from __future__ import annotations

from typing import Any, Sequence

from .state import AcceleratorState, GradientState


class AcceleratedScheduler:
    """Wraps a learning-rate scheduler.

    A scheduler written for one process counts one step per batch. With ``N`` processes
    each step consumes ``N`` batches, so unless batches are split (``split_batches``) the
    scheduler is stepped ``N`` times per optimizer step. It does not step while gradients
    are being accumulated, nor when the optimizer skipped its step (fp16 overflow).

    Args:
        scheduler: the user's scheduler.
        optimizers: the prepared optimizers it follows.
        step_with_optimizer: step in lockstep with the optimizers (else on every call).
        split_batches: batches are split across processes rather than multiplied.
    """

    def __init__(self, scheduler: Any, optimizers: Sequence[Any], step_with_optimizer: bool = True,
                 split_batches: bool = False) -> None:
        self.scheduler = scheduler
        self.optimizers = optimizers if isinstance(optimizers, (list, tuple)) else [optimizers]
        self.split_batches = split_batches
        self.step_with_optimizer = step_with_optimizer
        self.gradient_state = GradientState()

    def step(self, *args: Any, **kwargs: Any) -> None:
        if not self.step_with_optimizer:
            self.scheduler.step(*args, **kwargs)
            return
        if not self.gradient_state.sync_gradients:
            if self.gradient_state.adjust_scheduler:
                self.scheduler._step_count += 1
            return
        if any(getattr(opt, "step_was_skipped", False) for opt in self.optimizers):
            return
        if self.split_batches:
            self.scheduler.step(*args, **kwargs)
            return
        for _ in range(AcceleratorState().num_processes):
            total = getattr(self.scheduler, "total_steps", None)
            if total is not None and self.scheduler._step_count > total:
                break  # OneCycleLR raises past its last step
            self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        return self.scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def get_lr(self) -> Any:
        return self.scheduler.get_lr()

    def print_lr(self, *args: Any, **kwargs: Any) -> Any:
        return self.scheduler.print_lr(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)
