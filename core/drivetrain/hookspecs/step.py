"""Run hooks of the training step: optimizer, scheduler and loader wrappers, scaler, autocast, backward, clipping.

Part of :mod:`drivetrain.hookspecs`, which collects every family; read its docstring for the
kinds of hook and the calling conventions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ContextManager, Iterable, Literal, Sequence

from ..kernel.descriptors import hookspec

if TYPE_CHECKING:  # pragma: no cover - names for the type hints only
    import torch
    from torch.utils.data import DataLoader

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


@hookspec
def drivetrain_wrap_dataloader(dataloader: DataLoader, run: Run) -> Iterable[Any] | None:
    """Adjust a prepared data loader (an XLA device loader, say).

    Called after the core has sharded the loader across processes.

    :param dataloader: The prepared loader (sharded, placing batches on the device), as the
        previous implementation left it.
    :param run: This process's run.
    :return: The loader to use (anything that iterates over batches: the batches are the
        user's, hence ``Any``), or ``None`` to keep it.

    Run hook, *chained*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_make_grad_scaler(run: Run, kwargs: dict[str, Any]) -> torch.amp.GradScaler | Literal[False] | None:
    """Create the gradient scaler of the run.

    Called once per ``Accelerator``. The precision plugin answers for fp16; a sharding
    strategy that needs its own scaler marks its implementation ``tryfirst``.

    :param run: This process's run.
    :param kwargs: The keyword arguments of ``GradScalerKwargs`` (values of any type, as
        ``torch.amp.GradScaler`` takes them).
    :return: The scaler; ``None`` when this plugin has none to offer (ask the next);
        ``False`` from a strategy whose engine scales the loss itself (DeepSpeed, marked
        ``tryfirst``): the run then has no scaler at all.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_autocast(run: Run, kwargs: dict[str, Any]) -> ContextManager[None] | None:
    """Return the context manager under which forward runs in the chosen precision.

    Called by ``accelerator.autocast()`` and by precision plugins: one that wraps a model's
    ``forward`` asks it from ``drivetrain_convert_model`` (with ``kwargs={}``) and wraps only
    when the answer is a ``torch.autocast``. A strategy whose engine runs the model in its
    own precision (DeepSpeed) marks its implementation ``tryfirst`` and answers a context
    that does nothing, which tells both that forward must be left alone.

    :param run: This process's run.
    :param kwargs: The keyword arguments of ``AutocastKwargs`` (``enabled``,
        ``cache_enabled``).
    :return: The context manager, or ``None`` when no autocast is needed (ask the next; the
        core then runs the block as it is).

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_backward(
    loss: torch.Tensor, run: Run, kwargs: dict[str, Any], models: Sequence[torch.nn.Module]
) -> bool | None:
    """Run backward for ``loss``.

    A grad scaler scales the loss here; an engine that runs backward itself (DeepSpeed) marks
    its implementation ``tryfirst``.

    :param loss: The loss tensor, already divided for gradient accumulation unless the
        strategy set ``run.options["strategy_accumulates"]``.
    :param run: This process's run.
    :param kwargs: The keyword arguments given to ``accelerator.backward`` (passed on to
        ``loss.backward``, any type).
    :param models: The models prepared by the ``Accelerator`` calling (an engine that owns
        the step finds itself among them; several accelerators may share one run). API 1.1.
    :return: ``True`` when done; ``None`` to let the next implementation, and finally the
        core (``loss.backward(**kwargs)``).

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_clip_grad_norm(
    parameters: Sequence[torch.Tensor], max_norm: float, norm_type: float, run: Run
) -> torch.Tensor | Literal[False] | None:
    """Clip the gradient norm of ``parameters`` and return the total norm.

    The core unscales fp16 gradients first. Strategies whose parameters are sharded (FSDP)
    compute the norm across shards.

    :param parameters: The parameters the user passed, as a list.
    :param max_norm: The largest norm allowed.
    :param norm_type: The order of the norm (``2.0``, ``inf``).
    :param run: This process's run.
    :return: The total norm (a tensor); ``None`` to let the core call
        ``torch.nn.utils.clip_grad_norm_``; ``False`` from an engine that clips inside its
        own step and measured no norm (``accelerator.clip_grad_norm_`` then returns
        ``None``): never an invented number.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_clip_grad_value(parameters: Sequence[torch.Tensor], clip_value: float, run: Run) -> bool | None:
    """Clip each gradient of ``parameters`` to ``[-clip_value, clip_value]``.

    Called before the core unscales fp16 gradients and clips with
    ``torch.nn.utils.clip_grad_value_``. A strategy that cannot clip by value raises a
    :class:`drivetrain.errors.DrivetrainError` naming ``clip_grad_norm_`` instead, before
    changing anything: an engine that steps inside ``backward`` (the gradients are gone when
    the user clips), or gradients sharded across processes.

    :param parameters: The parameters the user passed, as a list.
    :param clip_value: The largest absolute value a gradient may keep.
    :param run: This process's run.
    :return: ``True`` when you clipped yourself; ``None`` to let the core.

    Run hook, *firstresult*, API 1.2.
    """
