"""Run hooks of ``prepare``: the objects of a call, and each model's wrap, compile, unwrap.

A model's precision conversion is no hook: the core calls ``run.precision.convert_model``
(:mod:`drivetrain.kernel.roles`) before the strategy wraps it.

Part of :mod:`drivetrain.hookspecs`, which collects every family; read its docstring for the
kinds of hook and the calling conventions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ..kernel.descriptors import hookspec

if TYPE_CHECKING:  # pragma: no cover - names for the type hints only
    import torch

    from ..kernel.hook_types import Accelerator, CompileOptions, Run


@hookspec(firstresult=True)
def drivetrain_prepare_objects(
    objects: Sequence[Any], run: Run, device_placement: Sequence[bool], accelerator: Accelerator
) -> Sequence[Any] | None:
    """Prepare all objects of one ``accelerator.prepare(...)`` call together.

    Most strategies leave this alone and the core prepares each object through the hooks
    below. A strategy that must see models, optimizers and schedulers at once answers here:
    an engine built from all three (DeepSpeed). It stands for placement and
    ``drivetrain_wrap_model`` only: the models it receives have already been through
    the run's ``Precision.convert_model`` (where the user built them: the strategy places them), and
    each model it returns in a model's position goes through ``drivetrain_finalize_model``
    (compilation) before the user gets it (API 1.2). A model whose wrapper must be compiled
    its own way answers ``drivetrain_compile_model``. Parameters that change identity when
    sharded (FSDP) need not answer: the core wraps every model of the call before it prepares
    any optimizer, so ``drivetrain_wrap_optimizer`` can point an optimizer created before
    ``prepare`` at the new parameters.

    :param objects: What the user passed, in order (flattened from lists and tuples): any
        object may be there, which is why it is ``Any``. Data loaders among them are already
        prepared by the core (sharded across processes), so their batch size per process is
        known.
    :param run: This process's run.
    :param device_placement: For each object, whether the user wants it moved to the device.
    :param accelerator: The ``Accelerator`` whose ``prepare`` this is (its gradient
        accumulation steps, the data loaders it prepared earlier). Read it; the core records
        what this hook returns.
    :return: The prepared objects, in the same order and number, or ``None`` to let the core
        prepare them one by one. The accelerator records every returned ``torch.nn.Module``
        as a prepared model, every ``torch.optim.Optimizer`` as a prepared optimizer and
        every learning-rate scheduler as a prepared scheduler (for ``backward``,
        ``save_state``, ...); anything else is handed back to the user as it is.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_transform_objects(
    objects: Sequence[Any], run: Run, accelerator: Accelerator
) -> Sequence[Any] | None:
    """Rewrite the models and optimizers of one ``accelerator.prepare(...)`` call together,
    before anything else is done to them.

    Called at the start of every ``prepare``, once its data loaders are prepared, whatever
    the strategy. A library that optimises a model together with its optimizer (kernels
    swapped, master weights kept beside low-precision ones: Intel Extension for PyTorch's
    ``optimize``) answers here, so the strategy then places and wraps what it returned as it
    would the user's objects (DDP composes with it).

    :param objects: What the user passed, in order (flattened; any object, hence ``Any``);
        data loaders already prepared, models and optimizers as given (a model prepared
        earlier may be among them).
    :param run: This process's run.
    :param accelerator: The ``Accelerator`` whose ``prepare`` this is.
    :return: A list of the same length, each replacement in the position of what it
        replaces, or ``None`` to keep the objects (not yours: the next plugin is asked).

    Arrived in API 1.4 as a *chained* hook; *firstresult* since 2.0.

    Run hook, *firstresult*, API 2.0.
    """


@hookspec(firstresult=True)
def drivetrain_wrap_model(model: torch.nn.Module, run: Run, evaluation_mode: bool) -> torch.nn.Module | None:
    """Wrap a model for the chosen strategy (DDP, FSDP, a DeepSpeed engine, ...).

    :param model: The converted module: on the run's device, unless the strategy's
        ``StrategySpec.places_models`` says it places models itself (then where the user
        built it, possibly on the meta device).
    :param run: This process's run.
    :param evaluation_mode: The user asked for inference only (``prepare_model(...,
        evaluation_mode=True)``): no gradient synchronisation is needed.
    :return: The wrapped module; ``None`` leaves it as it is (one process, or not yours).

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_finalize_model(model: torch.nn.Module, run: Run) -> torch.nn.Module | None:
    """Last change to a prepared model: compilation (a feature such as ``compile``).

    Called for every prepared model, whichever hook wrapped it (``drivetrain_wrap_model`` or
    ``drivetrain_prepare_objects``), after the run's precision finished it
    (``Precision.finalize_model``).

    :param model: The wrapped model.
    :param run: This process's run.
    :return: The model to use from now on, or ``None`` to keep it (the next plugin is asked).

    *Chained* before API 2.0 (the precision's part is now ``Precision.finalize_model``).

    Run hook, *firstresult*, API 2.0.
    """


@hookspec(firstresult=True)
def drivetrain_compile_model(
    model: torch.nn.Module, run: Run, options: CompileOptions
) -> torch.nn.Module | None:
    """Compile a prepared model whose wrapper must be compiled its own way.

    Called by the plugin that provides the ``compile`` feature, from its
    ``drivetrain_finalize_model``, before it falls back to ``torch.compile``. A strategy whose
    wrapper owns forward and backward (a DeepSpeed engine) compiles through that wrapper
    here, so its hooks stay in place.

    :param model: The prepared (wrapped) model.
    :param run: This process's run.
    :param options: The compilation asked for (``backend``, ``mode``, ``fullgraph``,
        ``dynamic``, ``options``).
    :return: The model to use from now on (it may be ``model`` itself, compiled in place),
        or ``None`` when the model is not yours.

    Run hook, *firstresult*, API 1.2.
    """


@hookspec(firstresult=True)
def drivetrain_unwrap_model(model: torch.nn.Module, run: Run, keep_fp32_wrapper: bool) -> torch.nn.Module | None:
    """Return the user's module from inside a prepared model.

    The core removes a ``torch.compile`` wrapper itself (``._orig_mod``); each strategy
    unwraps its own wrapper (``DistributedDataParallel.module``).

    :param model: A prepared model, its compile wrapper already removed.
    :param run: This process's run.
    :param keep_fp32_wrapper: Keep the precision's forward wrapper (autocast, fp32 outputs)
        in place; ``False`` asks for the bare module.
    :return: The module inside, or ``None`` when the model is not wrapped by you.

    Run hook, *firstresult*, API 1.0.
    """
