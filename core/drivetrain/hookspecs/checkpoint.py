"""Run hooks of ``save_state`` and ``load_state``.

Part of :mod:`drivetrain.hookspecs`, which collects every family; read its docstring for the
kinds of hook and the calling conventions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Sequence

from ..kernel.descriptors import hookspec

if TYPE_CHECKING:  # pragma: no cover - names for the type hints only
    import torch

    from ..kernel.hook_types import AcceleratedOptimizer, DeferredWrites, Run


@hookspec(firstresult=True)
def drivetrain_get_state_dict(model: torch.nn.Module, run: Run, unwrap: bool) -> dict[str, torch.Tensor] | None:
    """Return the full state dict of a prepared model, gathered where it is sharded.

    Every process calls it (gathering is collective); the result only needs to be complete
    on the main process.

    :param model: A prepared model.
    :param run: This process's run.
    :param unwrap: Key the state as the user's module names it (``True``), or as the
        prepared wrapper does.
    :return: The state dict, or ``None`` to let the core call ``state_dict()`` on the
        (unwrapped) model.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_save_model_state(
    model: torch.nn.Module, index: int, directory: str, run: Run, safe_serialization: bool, options: dict[str, Any],
    deferred: DeferredWrites | None,
) -> Sequence[str] | None:
    """Write the state of the ``index``-th prepared model into a checkpoint directory.

    Called on every process. Do not sync the files: the core's commit fsyncs every file a
    process returns, after ``save_state`` has returned, and records their checksums in the
    manifest.

    :param model: The prepared model.
    :param index: Its position among the accelerator's prepared models.
    :param directory: The checkpoint being written (a temporary directory that is renamed
        into place once every process has finished).
    :param run: This process's run.
    :param safe_serialization: The user asked for safetensors (``save_state``'s argument).
    :param options: ``save_state``'s extra keyword arguments (any type), meant for the
        strategy's own model-save function (DeepSpeed's ``save_checkpoint``). API 1.2.
    :param deferred: ``None`` for a blocking ``save_state``. In ``save_state(blocking=False)``
        a :class:`~drivetrain.plugin_api.DeferredWrites`: the hook may do here only what
        needs the other processes or the live tensors (gathering a state, copying it to host
        memory) and hand the writing to ``deferred.defer(write)``; ``write`` runs on the
        commit's thread after ``save_state`` has returned, must not use the process group,
        and returns the names of the files it wrote. A hook that ignores it writes here, as
        in a blocking save. API 1.9.
    :return: The file names written by this process (relative to ``directory``), or
        ``None`` to let the core write a safetensors file of ``drivetrain_get_state_dict`` on
        the main process. Files a deferred write will write are not listed here.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_load_model_state(model: torch.nn.Module, index: int, directory: str, run: Run,
                                manifest: dict[str, Any], options: dict[str, Any]) -> bool | None:
    """Read the state of the ``index``-th prepared model from a checkpoint directory.

    Every file the manifest lists has been checked against its checksum, and
    ``drivetrain_check_checkpoint`` has passed, before this is called. Read pickles only
    through ``drivetrain.plugin_api.safe_torch_load``, and check shapes and dtypes before
    changing the model: a failed load must leave it as it was.

    :param model: The prepared model.
    :param index: Its position among the accelerator's prepared models.
    :param directory: The checkpoint directory.
    :param run: This process's run.
    :param manifest: The checkpoint's manifest, as read from its JSON (who wrote it, world
        size, files).
    :param options: ``load_state``'s model keyword arguments (``strict``, ``map_location``,
        ...; any type). API 1.2.
    :return: ``True`` when loaded; ``None`` to let the core read the file it wrote. Raise
        :class:`drivetrain.errors.CheckpointError` when the checkpoint cannot be read by
        this strategy, with the reason.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec
def drivetrain_check_checkpoint(models: list[torch.nn.Module], optimizers: list[AcceleratedOptimizer],
                                directory: str, run: Run, manifest: dict[str, Any], options: dict[str, Any]) -> None:
    """Check a checkpoint against every prepared model and optimizer before anything loads.

    Called on every process, once every process has verified the checksums and checked the
    core's own states (so a check may call collectives, as a sharded model's ``state_dict``
    does), and before any ``drivetrain_load_*_state``. Change nothing here.

    :param models: The prepared models, in checkpoint order (``index`` is the position).
    :param optimizers: The prepared optimizers, in checkpoint order.
    :param directory: The checkpoint directory.
    :param run: This process's run.
    :param manifest: The checkpoint's manifest, as read from its JSON.
    :param options: ``load_state``'s model keyword arguments (any type).
    :return: Ignored. Raise :class:`drivetrain.errors.CheckpointError` naming the first
        mismatch among the objects this plugin loads: the processes then agree, every one
        fails, and nothing has changed.

    Run hook, *broadcast*, API 1.5.
    """


@hookspec(firstresult=True)
def drivetrain_save_optimizer_state(
    optimizer: AcceleratedOptimizer, index: int, directory: str, run: Run, deferred: DeferredWrites | None
) -> Sequence[str] | None:
    """Write the state of the ``index``-th prepared optimizer. Same contract as the model's.

    :param optimizer: The prepared optimizer.
    :param index: Its position among the accelerator's prepared optimizers.
    :param directory: The checkpoint being written.
    :param run: This process's run.
    :param deferred: As for the model's hook: writing a non-blocking save may defer. API 1.9.
    :return: The file names written by this process, or ``None`` to let the core write the
        optimizer's state on the main process.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_load_optimizer_state(optimizer: AcceleratedOptimizer, index: int, directory: str, run: Run,
                                    manifest: dict[str, Any]) -> bool | None:
    """Read the state of the ``index``-th prepared optimizer. Same contract as the model's.

    :param optimizer: The prepared optimizer.
    :param index: Its position among the accelerator's prepared optimizers.
    :param directory: The checkpoint directory, its checksums verified.
    :param run: This process's run.
    :param manifest: The checkpoint's manifest, as read from its JSON.
    :return: ``True`` when loaded; ``None`` to let the core read the file it wrote.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec
def drivetrain_on_checkpoint(event: Literal["save", "load"], directory: str, run: Run) -> None:
    """Be told that a checkpoint was saved or loaded.

    Called on the training thread. For ``"save"``: on the process that published the
    checkpoint (the main one, or each node's first with ``save_on_each_node``), once it is
    synced and in place: inside ``save_state``, or with
    ``DRIVETRAIN_CHECKPOINT_BACKGROUND=1`` at the next ``log``, ``save_state``,
    ``load_state``, ``wait_for_everyone`` or ``end_training``. For ``"load"``: on every process, after the
    state is restored.

    :param event: ``"save"`` or ``"load"``.
    :param directory: The checkpoint's directory (its final name). For a checkpoint in
        object storage: its URL (on ``"save"``, once uploaded, manifest included).
    :param run: This process's run.
    :return: Ignored. An exception is logged as a warning, not raised: a notification
        never costs a checkpoint (the trackers are still told).

    Run hook, *broadcast*, API 1.0.
    """
