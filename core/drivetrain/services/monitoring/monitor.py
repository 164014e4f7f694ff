"""The step monitor: watches what ``prepare`` returned and times every optimizer step.

What it wraps, at prepare time (nothing when ``MonitorKwargs`` is not given):

- a prepared data loader: each pass's batches go through :meth:`StepMonitor.observe`, which
  times the wait for each batch (the pass's start included: seeds, workers) and counts its
  samples and tokens;
- a prepared optimizer: its ``step`` (an instance attribute in front of the class's), timed;
  before a real step (gradients synchronised) the spike guard judges the step's losses;
- a prepared model: a forward pre-hook starts the FLOP count on the first forward, removed
  at once; the count ends at the first optimizer step;
- the run's collectives (several processes): a timing layer (:mod:`.timed_collectives`).

A step ends when the first prepared optimizer takes a real step; its time runs from the end
of the previous one. The parts are measured on the host: data wait, optimizer, collectives
issued outside those two; forward+backward is the rest. Every ``log_every`` steps the device
is synchronised once and the window's wall time read, so the step time is the device's even
where the parts are only the time to queue work.
"""

from __future__ import annotations

import functools
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from ...kernel.errors import ConfigError, LossSpikeError
from ..checkpointing import calls
from ..progress_bar import drawn_bars
from . import timed_collectives
from .report import Window, bar_postfix, figures, summary_text
from .spike_guard import SpikeGuard
from .throughput import FirstStepFlops, samples_in, tokens_in

if TYPE_CHECKING:  # pragma: no cover
    from ...runtime.session import Session

logger = logging.getLogger("drivetrain.monitoring")


class StepMonitor:
    """One Accelerator's measurements (see the module's docstring)."""

    def __init__(self, session: Session, options: Any) -> None:
        if options.on_spike == "stop" and options.checkpoint_dir is None and not \
                session.project_configuration.automatic_checkpoint_naming:
            raise ConfigError("MonitorKwargs(on_spike='stop') saves the last good state before it stops: give "
                              "MonitorKwargs(checkpoint_dir=...) or ProjectConfiguration(project_dir=..., "
                              "automatic_checkpoint_naming=True)")
        self.options = options
        self._session = weakref.ref(session)  # the session holds this monitor: no cycle
        self._run = session.run
        self._device = session.device  # read once: the state's attributes are looked up through plugins
        self.steps = 0  # real optimizer steps taken (skipped ones included)
        self.first_step_s: float | None = None
        self.flops = FirstStepFlops()
        self.guard = SpikeGuard(options.spike_factor, options.spike_window, options.on_spike) \
            if options.on_spike is not None else None
        self.window = Window()  # what the steps since the last log added (the first step's, until it ends)
        self.total = Window()
        self.last_figures: dict[str, float] = {}
        self._step_started: float | None = None
        self._window_started: float | None = None
        self._in_part = False  # inside a data wait or an optimizer step: collectives counted there
        self._position: tuple[int | None, int | None] = (None, None)
        self._boundary: Any = None  # weakref to the optimizer whose step ends a step
        self._collectives = timed_collectives.install(self._run, self._record_collective)
        self._finished = False

    # ----------------------------------------------------------- watching prepared objects

    def watch(self, obj: Any) -> Any:
        """Start watching a prepared model, optimizer or data loader (anything else is left alone)."""
        if isinstance(obj, torch.nn.Module):
            self.flops.watch(obj)
        elif hasattr(obj, "batch_observer"):
            obj.batch_observer = self.observe
        elif callable(getattr(obj, "step", None)) and hasattr(obj, "zero_grad"):
            self._watch_optimizer(obj)
        return obj

    def forget_prepared(self) -> None:
        """The accelerator forgot what it prepared (``free_memory``): the next optimizer ends steps."""
        self._boundary = None

    def _watch_optimizer(self, optimizer: Any) -> None:
        if getattr(optimizer, "_monitored_step", None) is not None:
            return
        real_step = optimizer.step
        monitor = weakref.ref(self)

        @functools.wraps(real_step)
        def step(*args: Any, **kwargs: Any) -> Any:
            watching = monitor()
            if watching is None:
                return real_step(*args, **kwargs)
            return watching._optimizer_step(optimizer, real_step, args, kwargs)

        optimizer.step = optimizer._monitored_step = step
        if self._boundary is None or self._boundary() is None:
            self._boundary = weakref.ref(optimizer)

    # --------------------------------------------------------------------- data wait

    def observe(self, batches: Iterator[Any], loader: Any) -> Iterator[Any]:
        """One pass of ``loader``: each wait for a batch timed, its samples and tokens counted."""
        clock = time.perf_counter
        epoch, index = getattr(loader, "iteration", None), 0
        try:
            while True:
                start = clock()
                if self._step_started is None:
                    self._step_started = start
                self._in_part = True
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                finally:
                    self._in_part = False
                    self.window.data += clock() - start
                window = self.window
                samples = samples_in(batch)
                if samples is not None:
                    window.samples += samples
                    window.counted_samples = True
                tokens = tokens_in(batch)
                if tokens is not None:
                    window.tokens = window.tokens + tokens
                    window.counted_tokens = True
                self._position = (epoch, index)
                index += 1
                yield batch
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()  # the loader's own clean-up (end of its pass) runs now, not at collection

    def _record_collective(self, seconds: float) -> None:
        if not self._in_part:
            self.window.collectives += seconds

    # ------------------------------------------------------------------------ losses

    def saw_loss(self, loss: Any) -> None:
        """A loss given to ``accelerator.backward`` (before dividing it for accumulation)."""
        if self._step_started is None:
            self._step_started = time.perf_counter()
        if self.guard is not None:
            self.guard.saw(loss, self._position)

    # -------------------------------------------------------------------- optimizer step

    def _optimizer_step(self, optimizer: Any, real_step: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        session = self._session()
        if session is None or not session.gradient_state.sync_gradients:
            return real_step(*args, **kwargs)  # accumulating: no step is taken
        ends_step = self._boundary is not None and self._boundary() is optimizer
        if self.flops.counting:
            self.flops.stop()
        if self.guard is not None and self._spike_stops_step(session, optimizer, ends_step):
            result = None
        else:
            start = time.perf_counter()
            self._in_part = True
            try:
                result = real_step(*args, **kwargs)
            finally:
                self._in_part = False
                self.window.optimizer += time.perf_counter() - start
        if ends_step:
            self._end_step(session)
        return result

    def _spike_stops_step(self, session: Session, optimizer: Any, ends_step: bool) -> bool:
        """Judge the losses of this step; True when the step is skipped (or the run stops)."""
        step = self.steps + 1 if ends_step else self.steps
        found = self.guard.judge(step)
        agreed = self.guard.agreed(found, self._run.collectives, self._device)
        if not agreed:
            return False
        self.guard.report(found, agreed, step)
        if self.options.on_spike == "warn":
            return False
        skip = getattr(optimizer, "skip_step", None)
        if skip is not None:
            skip()
        else:
            optimizer.zero_grad(set_to_none=True)
        if self.options.on_spike == "stop":
            self._stop(session, found, step)
        return True

    def _stop(self, session: Session, found: list[Any], step: int) -> None:
        directory = calls.save_state(session, self.options.checkpoint_dir, safe_serialization=True,
                                     save_model_func_kwargs={})
        what = found[0].describe(self.guard.factor) if found else \
            f"another process saw a loss spike at step {step}"
        self.finish()
        raise LossSpikeError(f"{what}; the run stopped before applying it. The last good state is saved in "
                             f"{directory}: resume with accelerator.load_state({str(directory)!r}) and leave the "
                             "batch out (accelerator.skip_first_batches), or lower the learning rate",
                             checkpoint=str(directory))

    # ------------------------------------------------------------------ steps, windows

    def _end_step(self, session: Session) -> None:
        end = time.perf_counter()
        started = self._step_started if self._step_started is not None else end
        self.steps += 1
        if self.steps == 1:  # the first step counts FLOPs and warms up: kept out of the windows
            self.first_step_s = end - started
            self.window = Window()
            session.run.platform.synchronize()
            self._window_started = self._step_started = time.perf_counter()
            return
        self.window.steps += 1
        self._step_started = end
        if self.window.steps >= self.options.log_every:
            self._close_window(session)

    def _close_window(self, session: Session) -> None:
        """Log the window's figures (one device synchronisation) and start the next window."""
        session.run.platform.synchronize()
        end = time.perf_counter()
        window, self.window = self.window, Window()
        window.wall = end - (self._window_started if self._window_started is not None else end)
        self._window_started = end
        self.total.add(window)
        values = self._figures(window)
        self.last_figures = values
        calls.log(session, values, step=self.steps)
        if session.is_main_process:
            postfix = bar_postfix(values)
            for bar in drawn_bars():
                bar.set_postfix(postfix, refresh=False)

    def _figures(self, window: Window) -> dict[str, float]:
        platform = self._run.platform
        peak = self.options.peak_flops
        if peak is None:
            peak = platform.peak_flops(str(self._session().mixed_precision))
        return figures(window, self._run.data_parallel_size, self.flops.flops, peak, platform.peak_memory(),
                       len(self.guard.flagged_steps) if self.guard is not None else 0)

    # ------------------------------------------------------------------------ the end

    def finish(self) -> None:
        """At ``end_training``: log the last, partial window, then the summary on the main process."""
        if self._finished:
            return
        self._finished = True
        self.flops.stop()
        timed_collectives.uninstall(self._run, self._collectives)
        session = self._session()
        if session is None:
            return
        if self.window.steps:
            self._close_window(session)
        if session.is_main_process and (self.total.steps or self.first_step_s is not None):
            values = self._figures(self.total)
            logger.info("%s", summary_text(values, self.total.steps, self.first_step_s,
                                           self.guard.flagged_steps if self.guard is not None else [],
                                           self.options.on_spike))
