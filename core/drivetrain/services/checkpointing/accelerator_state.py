"""Accelerate's ``checkpointing.save_accelerator_state`` / ``load_accelerator_state``.

In Accelerate these are what ``Accelerator.save_state``/``load_state`` call, given the
accelerator's objects one by one. drivetrain's checkpoint (atomic directory, manifest,
checksums, strategy plugins writing their own models and optimizers) belongs to the
``Accelerator`` that prepared the objects, so these functions save and load through its
session (the one the process's run carries, ``Run.session``) and check that the objects given
are the ones it prepared.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ...kernel.errors import CheckpointError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from ...runtime.session import Session


def _session() -> Session:
    """The session of the newest ``Accelerator`` on this process's run."""
    from ...runtime.state import AcceleratorState

    initialized = AcceleratorState._shared_state.get("_initialized")
    session = AcceleratorState().run.session if initialized else None
    if session is None:
        raise CheckpointError("save_accelerator_state/load_accelerator_state work on the objects an Accelerator "
                              "prepared; build one and prepare them first (or call accelerator.save_state)")
    return session


def _check_same(what: str, given: Sequence[Any] | None, prepared: Sequence[Any]) -> None:
    if given is None:
        return
    if len(given) != len(prepared) or any(a is not b for a, b in zip(given, prepared)):
        raise ConfigError(f"the {what} given are not the ones the Accelerator prepared; pass every prepared one, "
                          "in the order accelerator.prepare returned them (a checkpoint holds them all)")


def _check_process(session: Session, process_index: int) -> None:
    if process_index != session.process_index:
        raise ConfigError(f"process_index {process_index} is not this process's ({session.process_index}); "
                          "pass session.process_index")


def _check_given(session: Session, process_index: int, optimizers: Sequence[Any] | None,
                 schedulers: Sequence[Any] | None, dataloaders: Sequence[Any] | None, scaler: Any,
                 models: Sequence[Any] | None = None) -> None:
    """The objects a save or load is given are this process's accelerator's own."""
    _check_process(session, process_index)
    _check_same("models", models, session.prepared.models)
    _check_same("optimizers", optimizers, session.prepared.optimizers)
    _check_same("schedulers", schedulers, session.prepared.schedulers)
    _check_same("dataloaders", dataloaders, session.prepared.dataloaders)
    if scaler is not None and scaler is not session.scaler:
        raise ConfigError("the scaler given is not the Accelerator's; pass session.scaler")


def save_accelerator_state(output_dir: str | os.PathLike, model_states: list[dict[str, Any]], optimizers: list,
                           schedulers: list, dataloaders: list, process_index: int, step: int, scaler: Any = None,
                           save_on_each_node: bool = False, safe_serialization: bool = True) -> Path:
    """Write a checkpoint of the process's ``Accelerator`` to ``output_dir``, with
    ``model_states`` as the models' weights and ``step`` as its step; returns the directory.

    The optimizers, schedulers, data loaders and scaler must be the ones the accelerator
    prepared (they are saved through it, each by the plugin that owns it).
    """
    from .run_state import save_run_state

    session = _session()
    prepared = session.prepared
    _check_given(session, process_index, optimizers, schedulers, dataloaders, scaler)
    if len(model_states) != len(prepared.models):
        raise ConfigError(f"{len(model_states)} model states given for {len(prepared.models)} prepared models; "
                          "pass one state dict per prepared model")
    config = session.project_configuration
    kept = config.save_on_each_node
    session.step, config.save_on_each_node = step, save_on_each_node
    try:
        return save_run_state(session, output_dir, safe_serialization, list(model_states))
    finally:
        config.save_on_each_node = kept


def load_accelerator_state(input_dir: str | os.PathLike, models: list, optimizers: list, schedulers: list,
                           dataloaders: list, process_index: int, scaler: Any = None, map_location: Any = None,
                           load_kwargs: dict[str, Any] | None = None, **load_model_func_kwargs: Any) -> dict[str, Any]:
    """Restore a checkpoint into the process's ``Accelerator`` and the objects it prepared
    (given here, and checked to be those); returns ``{"step": ...}``, the step it was saved at.

    Every file is verified and every state checked before anything changes.
    """
    from .run_state import finish_commit, load_run_state

    session = _session()
    _check_given(session, process_index, optimizers, schedulers, dataloaders, scaler, models)
    load_kwargs = dict(load_kwargs or {})
    if map_location is not None:
        load_kwargs.setdefault("map_location", map_location)
    finish_commit(session)
    load_run_state(session, input_dir, options=load_model_func_kwargs, load_kwargs=load_kwargs)
    return {"step": session.step}
