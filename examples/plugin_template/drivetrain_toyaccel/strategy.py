"""The ``toyaverage`` strategy: the template of a strategy.

Every process holds the whole model; at the end of each accumulation window the gradients are
averaged over the processes, one all-reduce per gradient, through the run's collectives (so
it works on whatever platform and communication plugin the run chose). A real vendor would
overlap communication with backward; the shape is what matters here:

- one subclass of ``drivetrain.plugin_api.Strategy``, named by ``StrategySpec(hooks=...)``.
  drivetrain builds one object for each run that chooses the strategy (``run.strategy``), with
  the ``Accelerator`` keywords the strategy declares (``self.arguments``), and calls its step
  methods (``backward``, ``no_sync``, ...) directly; its ``@hookimpl`` methods are run hooks of
  that run only, so no hook checks which strategy the run uses and nothing is kept in
  module-level variables;
- the object keeps the run's state as attributes (its options, how many windows it averaged);
- ``drivetrain_configure_run`` resolves the options once per ``Accelerator`` and returns the
  object itself: the names in ``exposes`` become attributes of the ``Accelerator`` and its
  state (``accelerator.toyaverage_plugin``);
- plugin code outside a hook reaches the object as ``run.strategy``.

Cheap to import: torch is imported by the methods that use it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, ContextManager, Mapping, Sequence

from drivetrain.plugin_api import ConfigError, Strategy, hookimpl

NAME = "toyaverage"
OPTIONS_ARGUMENT = "toyaverage_plugin"
REDUCTIONS = ("mean", "sum")


@dataclass
class ToyAverageOptions:
    """Options of the ``toyaverage`` strategy; ``Accelerator(toyaverage_plugin=...)`` selects it.

    Attributes:
        reduction: ``mean`` (average the gradients, as DDP does) or ``sum``.
    """

    reduction: str = "mean"


class GradientAveraging(Strategy):
    """The ``toyaverage`` strategy of one run.

    Attributes:
        options: the run's :class:`ToyAverageOptions` (``None`` until an ``Accelerator`` configured it).
        windows: how many accumulation windows this run's gradients were combined for.
    """

    exposes = (OPTIONS_ARGUMENT,)

    def __init__(self, run: Any, arguments: Mapping[str, Any] | None = None) -> None:
        super().__init__(run, arguments)
        self.options: ToyAverageOptions | None = None
        self.windows = 0

    @property
    def toyaverage_plugin(self) -> ToyAverageOptions:
        if self.options is None:
            raise AttributeError(OPTIONS_ARGUMENT)
        return self.options

    @hookimpl
    def drivetrain_configure_run(self, run, accelerator):
        options = self.arguments.get(OPTIONS_ARGUMENT) or ToyAverageOptions()
        if not isinstance(options, ToyAverageOptions):
            raise ConfigError(f"{OPTIONS_ARGUMENT} must be a ToyAverageOptions, not {type(options).__name__}")
        if options.reduction not in REDUCTIONS:
            raise ConfigError(f"ToyAverageOptions(reduction={options.reduction!r}) is not one of "
                              f"{', '.join(REDUCTIONS)}; choose one of them")
        self.options = options
        return self

    def no_sync(self, model: Any) -> ContextManager[Any]:
        # Gradients are combined only when a window ends (in backward): nothing to switch off.
        return contextlib.nullcontext()

    def backward(self, loss: Any, kwargs: Mapping[str, Any], models: Sequence[Any]) -> None:
        from drivetrain.plugin_api import GradientState

        self.run.precision.backward(loss, kwargs)
        if not GradientState().sync_gradients:
            return
        run = self.run
        if run.state.num_processes > 1:
            for model in models:
                for parameter in model.parameters():
                    if parameter.grad is not None:
                        parameter.grad.copy_(run.collectives.all_reduce(parameter.grad, self.options.reduction))
        self.windows += 1
