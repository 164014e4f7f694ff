"""What one ``Accelerator``'s training keeps that the services read and change.

The facade builds one :class:`Session` per ``Accelerator`` and hands it to the services
(checkpointing, checkpoint on preemption, the step monitor); they never see the
``Accelerator`` itself, so they sit below it and import nothing of it. Several
``Accelerator`` objects may share one run (and one ``AcceleratorState``), each with what it
prepared: the run carries the newest one's session (``Run.session``), which Accelerate's
module functions (``save_accelerator_state``) and plugins reach.
"""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .prepared import PreparedObjects

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .kwargs_handlers import ProjectConfiguration
    from .run import Run
    from .state import AcceleratorState, GradientState

__all__ = ["Session"]


def _of_state(name: str) -> Any:
    return property(lambda self: getattr(self.state, name), doc=f"The ``AcceleratorState``'s ``{name}``.")


@dataclass(eq=False)
class Session:
    """One ``Accelerator``'s training: its run and states, what it prepared, its counters.

    Attributes:
        run: the run whose plugins act.
        state: the ``AcceleratorState``.
        gradient_state: the ``GradientState`` (accumulation window, end of data).
        project_configuration: where and how checkpoints are written.
        prepared: what ``prepare()`` recorded, and the registered objects and pre-hooks.
        scaler: the grad scaler of the run's precision, or ``None``.
        step: the accelerator's step counter (``Accelerator.step``), saved in checkpoints.
        trackers: the experiment trackers (``Accelerator.trackers``), or ``None``.
        preemption: the checkpoint-on-preemption watch, or ``None``.
        monitor: the step monitor, or ``None``.
        published_checkpoints: checkpoints the commit thread put in place, told to plugins and
            trackers on the training thread at the next call of the facade.
    """

    run: Run
    state: AcceleratorState
    gradient_state: GradientState
    project_configuration: ProjectConfiguration
    prepared: PreparedObjects = field(default_factory=PreparedObjects)
    scaler: Any = None
    step: int = 0
    trackers: Any = None
    preemption: Any = None
    monitor: Any = None
    published_checkpoints: collections.deque[str] = field(default_factory=collections.deque)

    def __post_init__(self) -> None:
        self.run.session = self  # the newest Accelerator's, for Accelerate's module functions

    # What the services read of the state, as the Accelerator's properties of the same names
    # (not annotated: a dataclass would take them for fields).
    device = _of_state("device")
    distributed_type = _of_state("distributed_type")
    mixed_precision = _of_state("mixed_precision")
    num_processes = _of_state("num_processes")
    process_index = _of_state("process_index")
    local_process_index = _of_state("local_process_index")
    is_main_process = _of_state("is_main_process")
    is_local_main_process = _of_state("is_local_main_process")

    @property
    def project_dir(self) -> str | None:
        return self.project_configuration.project_dir

    @property
    def sync_gradients(self) -> bool:
        return self.gradient_state.sync_gradients

    def __getstate__(self) -> dict[str, Any]:
        # The run (plugin manager, process group) and the watches of this process's objects are
        # the process's own: an unpickled session takes the run of the process that loads it.
        state = dict(self.__dict__)
        state.pop("run", None)
        state["monitor"] = state["preemption"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.run = self.state.run

    def on_checkpoint_saved(self, directory: os.PathLike | str) -> None:
        """Called from the commit's thread once a checkpoint is in place, on the process that
        published it; the notice waits for the facade's next call on the training thread."""
        self.published_checkpoints.append(os.fspath(directory))

