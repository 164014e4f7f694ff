"""The optimizer wrapper: steps only when gradients are synchronised, through the grad scaler
when there is one, and reports a step the scaler skipped.

A step through the scaler must not wait for the device: reading the loss scale
(``GradScaler.get_scale``) copies it to the host, and the CPU then stops queueing the next
step while the device works. Whether the scaler skipped a step is therefore learned from
whether it called the real optimizer's ``step`` (a step pre-hook records it), and for
optimizers that take the inf check themselves (fused/capturable Adam) from the ``found_inf``
tensor the scaler hands them, read only when someone asks ``step_was_skipped``."""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

from .state import GradientState


def move_state_to_device(state: Any, device: torch.device) -> Any:
    """Tensors of an optimizer state dict moved to ``device`` (``step`` counters stay put)."""
    if isinstance(state, torch.Tensor):
        return state.to(device)
    if isinstance(state, dict):
        return {k: (v if k == "step" else move_state_to_device(v, device)) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(move_state_to_device(v, device) for v in state)
    return state


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps a user's optimizer for a prepared run.

    Args:
        optimizer: the optimizer to wrap.
        device_placement: move a loaded state dict onto the run's device.
        scaler: the fp16 gradient scaler, or ``None``.
        device: the run's device.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, device_placement: bool = True,
                 scaler: Any = None, device: torch.device | None = None) -> None:
        # The wrapped optimizer holds the state; torch.optim.Optimizer.__init__ is not called.
        self.optimizer = optimizer
        self.scaler = scaler
        self.device_placement = device_placement
        self.device = device
        self.gradient_state = GradientState()
        self._is_overflow = False
        self._accelerate_step_called = False
        # What the last scaled step left to tell whether it was skipped (read lazily).
        self._step_ran = True
        self._found_inf: torch.Tensor | None = None
        self._scale_before: float | None = None
        self._step_hook = self._watch_real_step()

    def _watch_real_step(self) -> Any:
        """Record, without a device sync, that the wrapped optimizer's real ``step`` ran."""
        register = getattr(self.optimizer, "register_step_pre_hook", None)
        if self.scaler is None or register is None:
            return None
        owner = weakref.ref(self)

        def on_real_step(optimizer: Any, args: Any, kwargs: Any) -> None:
            wrapper = owner()
            if wrapper is not None:
                wrapper._step_ran = True
                # set by the scaler for optimizers that skip on inf themselves
                wrapper._found_inf = getattr(optimizer, "found_inf", None)

        return register(on_real_step)

    # Read-through attributes of the real optimizer.
    @property
    def state(self) -> Any:
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = value

    @property
    def defaults(self) -> dict[str, Any]:
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.optimizer.defaults = value

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.device_placement and self.device is not None:
            state_dict = move_state_to_device(state_dict, self.device)
        self.optimizer.load_state_dict(state_dict)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        if not self.gradient_state.sync_gradients:
            return  # accumulating: keep the gradients of earlier micro-batches
        if set_to_none is None:
            self.optimizer.zero_grad()
        else:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def train(self) -> None:
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()

    def eval(self) -> None:
        if hasattr(self.optimizer, "eval") and callable(self.optimizer.eval):
            self.optimizer.eval()

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if not self.gradient_state.sync_gradients:
            return None  # accumulating: the step happens at the end of the window
        if self.scaler is None:
            self._is_overflow = False
            return self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        self._is_overflow = None  # known once asked
        self._step_ran, self._found_inf, self._scale_before = False, None, None
        if self._step_hook is None:
            # An optimizer without step hooks: compare the scale, which costs two syncs.
            self._scale_before = self.scaler.get_scale()
        result = self.scaler.step(self.optimizer, closure) if closure is not None else self.scaler.step(self.optimizer)
        self.scaler.update()
        if self._scale_before is not None:
            self._is_overflow = self.scaler.get_scale() < self._scale_before
        return result

    def skip_step(self) -> None:
        """Take no step this time (``MonitorKwargs`` skipping a loss spike): the gradients are
        dropped, a scaler that already unscaled them forgets it, and ``step_was_skipped`` is
        ``True`` (the scheduler then does not step either)."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            try:
                self.scaler.update()  # clears the per-optimizer "unscaled" state unscale_() left
            except AssertionError:  # nothing was unscaled in this step: nothing to clear
                pass
        self._is_overflow = True

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last ``step`` was skipped because fp16 gradients overflowed."""
        if self._is_overflow is None:
            if not self._step_ran:
                self._is_overflow = True  # the scaler found inf/nan and did not call the real step
            elif self._found_inf is not None:
                self._is_overflow = bool(self._found_inf)  # the one sync, paid only by who asks
            else:
                self._is_overflow = False
            self._found_inf = None
        return self._is_overflow

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_step_hook"] = None  # a hook handle refers to the optimizer's hook table
        state["_is_overflow"] = self.step_was_skipped
        state["_found_inf"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._step_hook = self._watch_real_step()

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"


# Accelerate's name for the helper above.
move_to_device = move_state_to_device


def patch_optimizer_step(accelerated_optimizer: Any, method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` (an optimizer's ``step``) wrapped to record on ``accelerated_optimizer`` that it
    ran: ``_accelerate_step_called`` becomes ``True``, which tells a skipped step from a real one."""
    import functools

    @functools.wraps(method)
    def patched_step(*args: Any, **kwargs: Any) -> Any:
        accelerated_optimizer._accelerate_step_called = True
        return method(*args, **kwargs)

    return patched_step
