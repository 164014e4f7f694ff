"""Run hooks of the training step's objects: the optimizer and scheduler wrappers.

The step itself (backward, clipping, autocast, the grad scaler, ``no_sync``) is no hook: the
core calls the run's role objects directly (``run.strategy``, ``run.precision``, ``run.platform``;
:mod:`drivetrain.kernel.roles`), and the data loader's device wrapper is the platform's
(``Platform.wrap_dataloader``).

Part of :mod:`drivetrain.hookspecs`, which collects every family; read its docstring for the
kinds of hook and the calling conventions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..kernel.descriptors import hookspec

if TYPE_CHECKING:  # pragma: no cover - names for the type hints only
    import torch

    from ..kernel.hook_types import AcceleratedOptimizer, AcceleratedScheduler, Run


@hookspec(firstresult=True)
def drivetrain_wrap_optimizer(optimizer: torch.optim.Optimizer, run: Run) -> AcceleratedOptimizer | None:
    """Return the optimizer wrapper of this run.

    Called after every model of the same ``prepare`` call was wrapped. A strategy whose
    engine owns the optimizer (DeepSpeed) returns its own wrapper. A strategy whose wrapper
    replaces parameters (FSDP) marks its implementation ``tryfirst``, points the optimizer's
    parameter groups at the replacements, and returns ``None`` to keep the default wrapper.

    :param optimizer: The user's optimizer.
    :param run: This process's run.
    :return: A :class:`drivetrain.plugin_api.AcceleratedOptimizer` (or a subclass), or
        ``None`` for the core's default ``AcceleratedOptimizer``.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_wrap_scheduler(
    scheduler: torch.optim.lr_scheduler.LRScheduler, optimizers: Sequence[AcceleratedOptimizer], run: Run
) -> AcceleratedScheduler | None:
    """Return the scheduler wrapper of this run.

    :param scheduler: The user's learning-rate scheduler.
    :param optimizers: The prepared optimizers it may drive (the one wrapping its optimizer,
        or all of them).
    :param run: This process's run.
    :return: A :class:`drivetrain.plugin_api.AcceleratedScheduler` (or a subclass), or
        ``None`` for the core's default.

    Run hook, *firstresult*, API 1.0.
    """
