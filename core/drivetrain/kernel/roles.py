"""The run's role objects: what a strategy and a precision do at each step, and the ``Run``
they belong to, as plugins see it.

Read like Lightning Fabric's ``Strategy`` and ``Precision``: a run has exactly one strategy
object and one precision object (``run.strategy``, ``run.precision``), built from the chosen
descriptors' ``hooks=`` classes when the run is (one run per ``AcceleratorState``), and the
core calls their methods directly on the per-step path (backward, clipping, autocast,
``no_sync``, the grad scaler, the precision's model conversion). No hook is asked there, so
nothing on that path fans out through pluggy. The strategy owns or refuses the precision
explicitly (:meth:`Strategy.own_precision`): an engine that runs the model in its own precision
replaces the precision object with one of its own, a strategy that cannot run a precision
raises, and no plugin has to probe another to learn who owns autocast.

A role object may still implement run hooks (``@hookimpl`` methods: ``drivetrain_configure_run``,
the checkpoint hooks, ``drivetrain_prepare_objects``, ...): the run registers it with pluggy
under a name of its own while the run lives, and those hooks reach it only through that run.

No torch here: the methods import what they need when called.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import TYPE_CHECKING, Any, ContextManager, Literal, Mapping, Protocol, Sequence

from .errors import DrivetrainError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .descriptors import PrecisionSpec


class Run(Protocol):
    """The run of one ``AcceleratorState``, as a plugin reads it (the ``run`` argument of every
    run hook, and ``self.run`` of a role object).

    Attributes:
        selection: the choice of platform, cluster environment, strategy and precision
            (``run.selection.mixed_precision``, ``run.selection.strategy``: descriptors).
        platform: the platform object (device, RNG, memory; ``drivetrain.plugin_api.Platform``).
        strategy: the run's :class:`Strategy` (the base class itself when none was chosen).
        precision: the run's :class:`Precision`, as the strategy owns it (the base class
            itself for full precision).
        state: the process state (``PartialState``: device, ranks, ...).
        accelerator_state: the ``AcceleratorState`` this run belongs to (``None`` for the
            process's first run, before any ``Accelerator``).
        handler_kwargs: the user's kwargs handlers by class name
            (``{"DistributedDataParallelKwargs": <handler>}``).
        grad_scaler: the run's gradient scaler (``None``: no loss scaling).
        compile_options: the ``TorchDynamoPlugin`` the ``Accelerator`` compiles with, or ``None``.
        data_parallel: ``(rank, size)`` among the groups of processes that read different
            batches, set by a strategy whose processes share a batch; ``None``: each reads its own.
    """

    selection: Any
    platform: Any
    strategy: Strategy
    precision: Precision
    state: Any
    accelerator_state: Any
    handler_kwargs: dict[str, Any]
    grad_scaler: Any
    compile_options: Any
    data_parallel: tuple[int, int] | None

    @property
    def collectives(self) -> Any:
        """The run's all_gather, all_reduce, broadcast, barrier (``Collectives``)."""

    @property
    def data_parallel_rank(self) -> int:
        """Which share of the data this process reads."""

    @property
    def data_parallel_size(self) -> int:
        """How many shares the data is split into."""

    @property
    def active_plugins(self) -> list[str]:
        """The names of the plugins whose run hooks this run calls."""

    def call(self, name: str, **kwargs: Any) -> Any:
        """Call run hook ``name`` on the run's active plugins and role objects."""

    def activate(self, *plugin_names: str) -> None:
        """Make more plugins active in this run."""


class _RoleObject:
    """What both roles share: the run they belong to, held weakly (the run registers its role
    objects with pluggy while it lives; a strong reference back would keep every ended run)."""

    def __init__(self, run: Run | None) -> None:
        self._run = weakref.ref(run) if run is not None else None

    @property
    def run(self) -> Run:
        """The :class:`Run` this object belongs to."""
        run = self._run() if self._run is not None else None
        if run is None:
            raise DrivetrainError(f"this {type(self).__name__} belongs to no run (or to one that has ended); "
                                  "use the objects of the current Accelerator's run")
        return run


class Precision(_RoleObject):
    """A mixed-precision mode's work at each step: model conversion, autocast, loss scaling.

    A ``PrecisionSpec(hooks=...)`` names a subclass; the run builds one object,
    ``cls(run, spec)``, when it is built. The base class is full precision: it converts nothing, autocasts
    nothing, scales nothing, and is the run's precision when ``"no"`` is chosen or the chosen
    precision names no class.

    Attributes:
        run: the :class:`Run` this object belongs to.
        spec: the chosen ``PrecisionSpec`` (``None`` for full precision).
    """

    def __init__(self, run: Run | None, spec: PrecisionSpec | None = None) -> None:
        super().__init__(run)
        self.spec = spec

    @property
    def name(self) -> str:
        """The precision's name (``"fp16"``, ``"bf16"``, ``"fp8"``; ``"no"`` for full precision)."""
        return self.spec.name if self.spec is not None else "no"

    @property
    def backend(self) -> str | None:
        """The backend of that precision (``"native"``, ``"te"``, ...; ``None`` for ``"no"``)."""
        return self.spec.backend if self.spec is not None else None

    def convert_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model converted for this precision before the strategy wraps it (FP8 layers,
        a ``forward`` under autocast). Called once per model by ``prepare``.

        :param model: the user's model, on the run's device unless the strategy places models.
        :return: the model to wrap (the same one, converted in place, or a new one).
        """
        return model

    def finalize_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model once the strategy wrapped it (a precision that must see the wrapper,
        such as FP8 layers under their recipe). Called before compilation.

        :param model: the wrapped model.
        :return: the model ``prepare`` returns (or compiles).
        """
        return model

    def autocast(self, kwargs: Mapping[str, Any]) -> ContextManager[Any]:
        """The context ``accelerator.autocast()`` enters.

        :param kwargs: the ``AutocastKwargs`` in effect, as keyword arguments.
        :return: a context manager (one that does nothing for full precision).
        """
        return contextlib.nullcontext()

    def make_grad_scaler(self, kwargs: Mapping[str, Any]) -> Any:
        """The run's gradient scaler, made once when the ``Accelerator`` is built.

        :param kwargs: the ``GradScalerKwargs`` in effect, as keyword arguments.
        :return: a ``torch.amp.GradScaler``, or ``None`` for no loss scaling.
        """
        return None

    def backward(self, loss: torch.Tensor, kwargs: Mapping[str, Any]) -> None:
        """Backward for ``loss`` (already divided for gradient accumulation).

        :param loss: the loss.
        :param kwargs: keyword arguments for ``loss.backward``.
        """
        loss.backward(**kwargs)


class Strategy(_RoleObject):
    """A distribution strategy's work on a run: wrapping, the step, clipping, synchronisation.

    A ``StrategySpec(hooks=...)`` names a subclass; the run builds one object,
    ``cls(run, arguments)``, when it is built. The base class is the run's strategy when no
    strategy is chosen (one process) or the chosen one names no class: it wraps nothing and
    leaves the step to the precision and torch.

    Attributes:
        run: the :class:`Run` this object belongs to.
        arguments: the ``Accelerator(...)`` keywords this strategy declares
            (``StrategySpec.accelerator_arguments`` and ``composes_arguments``) that the user
            gave, by name (``{"fsdp_plugin": FullyShardedDataParallelPlugin(...)}``); a later
            ``Accelerator`` on the same state adds its own (:meth:`add_arguments`).
        accumulates_gradients: ``True`` when the strategy's engine counts the accumulation
            window itself, so ``backward`` does not divide the loss.
    """

    accumulates_gradients: bool = False

    def __init__(self, run: Run | None, arguments: Mapping[str, Any] | None = None) -> None:
        super().__init__(run)
        self.arguments: dict[str, Any] = dict(arguments or {})

    def add_arguments(self, arguments: Mapping[str, Any]) -> None:
        """Take the arguments of a further ``Accelerator`` built on the same state."""
        self.arguments.update(arguments)

    def own_precision(self, precision: Precision) -> Precision:
        """Own or refuse the run's precision; called once, when the run is built.

        :param precision: the chosen precision's object.
        :return: the precision object the run uses: ``precision`` itself when the strategy lets
            it work unchanged, or an object of the strategy's own when its engine applies the
            precision (autocast, scaling and backward are then the engine's).
        :raise ConfigError: the strategy cannot run this precision (the message names the fix).
        """
        return precision

    def backward(self, loss: torch.Tensor, kwargs: Mapping[str, Any], models: Sequence[torch.nn.Module]) -> None:
        """Backward for ``loss`` (divided for accumulation unless ``accumulates_gradients``).

        :param loss: the loss.
        :param kwargs: keyword arguments of ``accelerator.backward``.
        :param models: the models the calling ``Accelerator`` prepared (an engine finds its own).
        """
        self.run.precision.backward(loss, kwargs)

    def make_grad_scaler(self, kwargs: Mapping[str, Any]) -> Any:
        """The run's gradient scaler: the precision's unless the strategy needs its own (a
        sharded one) or none (its engine scales).

        :return: a gradient scaler, or ``None``.
        """
        return self.run.precision.make_grad_scaler(kwargs)

    def clip_grad_norm(self, parameters: Sequence[torch.Tensor], max_norm: float,
                       norm_type: float) -> torch.Tensor | Literal[False] | None:
        """Clip the gradients' total norm, for gradients the strategy shards or owns; called
        after unscaling.

        :return: the total norm; ``False`` when the strategy clipped but measured no norm;
            ``None`` to let torch clip (the platform's own clipping, where it has one).
        """
        return self.run.platform.clip_grad_norm(parameters, max_norm, norm_type)

    def clip_grad_value(self, parameters: Sequence[torch.Tensor], clip_value: float) -> bool:
        """Clip each gradient; raise where the strategy cannot (sharded or consumed gradients).

        :return: ``True`` when the strategy clipped; ``False`` to let torch clip after unscaling.
        """
        return False

    def no_sync(self, model: torch.nn.Module) -> ContextManager[Any]:
        """The context in which backward does not synchronise ``model``'s gradients."""
        return contextlib.nullcontext()

    def sync_in_backward(self, model: torch.nn.Module) -> ContextManager[Any]:
        """The context in which the next backward synchronises ``model`` even inside ``no_sync``."""
        return contextlib.nullcontext()


__all__ = ["Precision", "Run", "Strategy"]
