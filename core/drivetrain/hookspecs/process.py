"""Run hooks that bring a process into its distributed setup and configure the run.

Part of :mod:`drivetrain.hookspecs`, which collects every family; read its docstring for the
kinds of hook and the calling conventions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..kernel.descriptors import hookspec

if TYPE_CHECKING:  # pragma: no cover - names for the type hints only
    import datetime

    from ..kernel.descriptors import PrecisionSpec
    from ..kernel.hook_types import Accelerator, Collectives, Run


@hookspec(firstresult=True)
def drivetrain_init_distributed(
    run: Run, timeout: datetime.timedelta, backend: str | None, init_method: str | None
) -> bool | None:
    """Join this process to its peers (create the default process group).

    Called once per process, when a run has more than one process and no group exists yet.
    A platform with its own runtime (XLA) marks its implementation ``tryfirst``.

    :param run: This process's run.
    :param timeout: How long a collective may take before it fails (from
        ``InitProcessGroupKwargs``, ``DRIVETRAIN_TIMEOUT`` or the default).
    :param backend: The communication backend asked for, or ``None`` for the platform's
        default.
    :param init_method: URL for the rendezvous, or ``None`` for environment variables.
    :return: ``True`` once the group exists; ``None`` when this plugin does not connect this
        run. When nobody answers ``True`` the run fails with a ``DistributedError``.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_collectives(run: Run) -> Collectives | None:
    """Provide the collective operations of this run (collective ops).

    Called once per multi-process run. Every operation in ``drivetrain.utils`` goes through
    the answer, so a platform with its own communication runtime replaces all of them at once
    by marking its implementation ``tryfirst``.

    :param run: This process's run.
    :return: An object implementing :class:`drivetrain.collectives.Collectives`
        (``all_gather``, ``all_reduce``, ``all_gather_into``, ``broadcast``, ``barrier``,
        ``all_gather_object``, ``broadcast_object_list``; optionally ``start_flag_max``, the
        asynchronous maximum of a small integer that ``save_on_preemption`` starts at each
        optimizer step, else done with a blocking ``all_reduce``), or ``None`` when this
        plugin does not connect this run. Nobody answering is a ``DistributedError``.

    Run hook, *firstresult*, API 1.0.
    """


@hookspec
def drivetrain_configure_run(run: Run, accelerator: Accelerator) -> object | None:
    """Configure the run for an ``Accelerator`` that was just built.

    Called at the end of ``Accelerator.__init__``, once the user's strategy arguments are the
    strategy object's ``arguments`` and the kwargs handlers in ``run.handler_kwargs``; again
    for each further ``Accelerator`` of the same ``AcceleratorState`` (same run, its arguments
    added). A strategy resolves and checks its options here (building its option object from
    environment variables when the user gave none), may set the accelerator's
    ``gradient_accumulation_steps``, and fails early on a bad combination.

    :param run: The run of the accelerator's ``AcceleratorState``.
    :param accelerator: The new ``Accelerator``.
    :return: ``None``, or an object (of any class: only its public attributes matter) that
        ``AcceleratorState``, ``GradientState`` and the ``Accelerator`` consult for an
        attribute they do not have themselves: Accelerate's attributes that belong to a
        backend (``state.deepspeed_plugin``, ``state.select_deepspeed_plugin(name)``). They
        are looked up on every access, so the object may compute them. An object with an
        ``exposes`` tuple offers only those names (API 1.6): a strategy's role object returns
        itself, its state and hooks staying its own. Every answer is kept.

    Run hook, *collected*, API 1.0.
    """


@hookspec(firstresult=True)
def drivetrain_adopt_precision(run: Run, precision: PrecisionSpec, recipe: Any) -> bool | None:
    """Offer the run's precision to a strategy whose engine can apply it itself.

    Called by a precision's role object, from its ``drivetrain_configure_run`` (marked
    ``trylast``, so the strategy has configured itself first), when the precision can be
    applied by an engine instead of by its own conversion: MS-AMP's fp8 runs inside
    DeepSpeed's engine. The strategy sets its own options from ``recipe``; a precision never
    writes another plugin's option object. A strategy that applies no precision leaves the
    hook alone.

    :param run: This process's run; the asking precision is ``run.selection.precision``.
    :param precision: The run's chosen precision (its ``name`` and ``backend``).
    :param recipe: That precision's options for this run: its kwargs handler (such as
        ``MSAMPRecipeKwargs(opt_level="O2")``), whose class belongs to the precision plugin,
        so anything goes.
    :return: ``True`` when the strategy's engine applies the precision (the precision then
        leaves the models and optimizers the engine builds alone); ``None`` when it does not
        (the precision converts them itself, as without a strategy). ``False`` is not an
        answer.

    Run hook, *firstresult*, API 1.6.
    """
