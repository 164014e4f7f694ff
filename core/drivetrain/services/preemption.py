"""Checkpoint on preemption: ``ProjectConfiguration(save_on_preemption=True)``.

Schedulers and cloud machines warn a job before they end it: SLURM with ``--signal``
(SIGUSR1 by default here), Kubernetes and spot instances with SIGTERM. On such a signal the
run saves a checkpoint through ``save_state()`` and exits with :data:`PREEMPTED_EXIT_CODE`.

Every process must save at the same step, or the save's collectives pair the wrong calls and
the job splits. A signal reaches the processes at different moments (or one process only), so
each keeps a local flag, and at each step boundary:

* it waits for the maximum of the flags started at the previous boundary (long finished: a
  handful of bytes over a channel of its own, see ``Collectives.start_flag_max``);
* when that maximum is set, every process learns it at this same boundary, saves and exits;
* otherwise it starts the next one with its flag as it is now.

A step boundary is the moment the script asks a prepared data loader for its next batch after
an iteration that called ``accelerator.backward`` and ended a gradient-accumulation window:
the optimizer step, the scheduler step and the script's own counters of that iteration are all
done, so the checkpoint is the state a run that never stopped had there, and the run started
again goes on bitwise as it would have. The last batch of an epoch is no boundary (the loader
is between two passes); a script whose loop ends first simply ends.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, TypeVar

from ..kernel.errors import ConfigError
from ..runtime.collectives import blocking_flag_max
from ..runtime.state import GradientState
from .checkpointing import calls
from .launchers import PREEMPTED_EXIT_CODE

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime.session import Session

logger = logging.getLogger("drivetrain.preemption")

Batch = TypeVar("Batch")

_armed: "PreemptionWatch | None" = None  # the newest Accelerator's watch


class PreemptionWatch:
    """One Accelerator's preemption signals, their agreement across processes, and the stop."""

    def __init__(self, session: Session, signal_names: tuple[str, ...]) -> None:
        self._session = weakref.ref(session)  # the session holds this watch: no cycle
        self.signals = [signal.Signals[name] for name in signal_names]
        self.received: int | None = None  # the first preemption signal this process got
        self.stepped = False  # accelerator.backward ran since the last boundary
        self.saved = False  # save_state ran since the last backward: this step is on disk already
        self._pending: Callable[[], int] | None = None
        self._start: Callable[[int], Callable[[], int]] | None = None  # the run's start_flag_max
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise ConfigError("ProjectConfiguration(save_on_preemption=True) catches signals, which only the main "
                              "thread can do: create the Accelerator in the main thread, or leave it off")
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def uninstall(self) -> None:
        """The signals' previous handlers back, and the loaders no longer checked for this run."""
        global _armed
        for signum, handler in self._previous.items():
            if signal.getsignal(signum) == self._on_signal:
                signal.signal(signum, handler)
        self._previous.clear()
        if _armed is self:
            _armed = None

    def _on_signal(self, signum: int, _frame: Any) -> None:
        # Only a flag: the step may be inside a collective, and the same signal may come twice
        # (a scheduler signals every process and the launcher passes its own copy on).
        if self.received is None:
            self.received = signum

    def at_step_boundary(self) -> None:
        """Between two iterations of the training loop: wait for the previous agreement, stop
        when it says so, start the next one."""
        if not self.stepped or not GradientState().sync_gradients:
            return
        self.stepped = False
        session = self._session()
        if session is None:
            return
        if self._pending is not None:
            agreed, self._pending = self._pending(), None
            if agreed:
                self.stop(session)
        if self._start is None:  # looked up once: the state's collectives cost more than the reduce
            collectives, device = session.state.collectives, session.device
            self._start = getattr(collectives, "start_flag_max", None) or (
                lambda value: blocking_flag_max(collectives, value, device))
        self._pending = self._start(1 if self.received is not None else 0)

    def stop(self, session: Session) -> None:
        """Save the run as ``save_state()`` does, wait until it is committed everywhere, requeue
        the SLURM job from the main process, and exit with :data:`PREEMPTED_EXIT_CODE`."""
        why = signal.Signals(self.received).name if self.received is not None else "a signal to another process"
        if self.saved:  # the script saved this very step: a second copy would only push an older one out
            logger.warning("preempted (%s): the checkpoint the script saved after this step is kept; exiting with "
                           "code %d", why, PREEMPTED_EXIT_CODE)
        else:
            logger.warning("preempted (%s): saving a checkpoint after this step, then exiting with code %d", why,
                           PREEMPTED_EXIT_CODE)
            calls.save_state(session, None, safe_serialization=True, save_model_func_kwargs={})
        calls.wait_for_everyone(session)  # committed on every process before anyone leaves
        if session.is_main_process:
            logger.warning("the preemption checkpoint is complete")
            requeue_slurm_job()
        self.uninstall()
        raise SystemExit(PREEMPTED_EXIT_CODE)


def arm(session: Session) -> PreemptionWatch | None:
    """The watch of an ``Accelerator``'s ``session`` when its project configuration asks for one, installed."""
    global _armed
    config = session.project_configuration
    if not config.save_on_preemption:
        return None
    if not config.automatic_checkpoint_naming:
        raise ConfigError("ProjectConfiguration(save_on_preemption=True) saves where save_state() saves without a "
                          "directory: set automatic_checkpoint_naming=True (and project_dir), so that the run started "
                          "again finds the checkpoint with load_state()")
    if _armed is not None:
        _armed.uninstall()
    watch = PreemptionWatch(session, config.preemption_signals)
    watch.install()
    _armed = watch
    return watch


def watched(batches: Iterator[Batch], loader: Any) -> Iterator[Batch]:
    """``batches`` of ``loader``, with the preemption check at each step boundary when a run is
    armed (else ``batches`` itself: nothing added to a loop that did not ask for it)."""
    if _armed is None:
        return batches
    return _checked(batches, loader, _armed)


def _checked(batches: Iterator[Batch], loader: Any, watch: PreemptionWatch) -> Iterator[Batch]:
    for batch in batches:
        yield batch
        if not loader.end_of_dataloader:  # between two passes is no place to stop (see above)
            watch.at_step_boundary()


def slurm_job_to_requeue(environ: Mapping[str, str]) -> str | None:
    """The id ``scontrol requeue`` takes for this job (an array task as ``<array job>_<task>``)."""
    array_job, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
    if array_job and task:
        return f"{array_job}_{task}"
    return environ.get("SLURM_JOB_ID") or None


def requeue_slurm_job(environ: Mapping[str, str] | None = None) -> bool:
    """Under SLURM, put this job back in the queue (``scontrol requeue``) when it allows it.

    A job submitted with ``--no-requeue`` (``Requeue=0``) or one that is not a batch job
    (``BatchFlag=0``, e.g. ``salloc``) is left alone, with a warning saying how to go on.
    Returns whether the job was requeued.
    """
    environ = os.environ if environ is None else environ
    job = slurm_job_to_requeue(environ)
    scontrol = shutil.which("scontrol", path=environ.get("PATH"))
    if job is None or scontrol is None:
        return False
    try:
        shown = subprocess.run([scontrol, "show", "job", job], capture_output=True, text=True, timeout=60)
        fields = dict(word.split("=", 1) for word in shown.stdout.split() if "=" in word)
        if fields.get("Requeue") == "0" or fields.get("BatchFlag") == "0":
            logger.warning("SLURM job %s was not requeued: it does not allow it (Requeue=%s, BatchFlag=%s); submit "
                           "it again (sbatch --requeue) to resume from the checkpoint", job,
                           fields.get("Requeue", "?"), fields.get("BatchFlag", "?"))
            return False
        done = subprocess.run([scontrol, "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        logger.error("SLURM job %s was not requeued: scontrol failed: %s; submit it again to resume", job, error)
        return False
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()
        logger.error("SLURM job %s was not requeued: scontrol requeue exited with %d%s; submit it again to resume",
                     job, done.returncode, f": {reason[-1]}" if reason else "")
        return False
    logger.warning("SLURM job %s requeued: it starts again from the checkpoint", job)
    return True
