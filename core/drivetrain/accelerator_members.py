"""Members of Accelerate's ``Accelerator`` that report configuration rather than act.

Kept out of :mod:`drivetrain.accelerator` (the facade's actions) as a base class: the kwargs
handlers the user passed, the precision and device questions scripts ask, and LOMO's fused
backward.
"""

from __future__ import annotations

from typing import Any

from .kernel.errors import ConfigError


class AccelerateMembers:
    """Accelerate's reporting members, over the run an ``Accelerator`` holds (``self.run``)."""

    run: Any
    state: Any
    trackers: Any
    _optimizers: list[Any]

    def _handler(self, class_name: str) -> Any:
        return self.run.handler_kwargs.get(class_name)

    @property
    def autocast_handler(self) -> Any:
        """The ``AutocastKwargs`` given in ``kwargs_handlers``, or ``None``."""
        return self._handler("AutocastKwargs")

    @property
    def ddp_handler(self) -> Any:
        """The ``DistributedDataParallelKwargs`` given in ``kwargs_handlers``, or ``None``."""
        return self._handler("DistributedDataParallelKwargs")

    @property
    def init_handler(self) -> Any:
        """The ``InitProcessGroupKwargs`` given in ``kwargs_handlers``, or ``None``."""
        return self._handler("InitProcessGroupKwargs")

    @property
    def scaler_handler(self) -> Any:
        """The ``GradScalerKwargs`` given in ``kwargs_handlers``, or ``None``."""
        return self._handler("GradScalerKwargs")

    @property
    def profile_handler(self) -> Any:
        """The ``ProfileKwargs`` given in ``kwargs_handlers``, or ``None``."""
        return self._handler("ProfileKwargs")

    @property
    def native_amp(self) -> bool:
        """Whether torch's own mixed precision (fp16/bf16 autocast) is in use."""
        return str(self.state.mixed_precision) in ("fp16", "bf16")

    @property
    def log_with(self) -> list[Any]:
        """The trackers selected: their names, and the tracker objects given."""
        choices = getattr(self.trackers, "_choices", [])  # no trackers: an empty list
        return [choice.name if hasattr(choice, "spec") else choice for choice in choices]

    @property
    def multi_device(self) -> bool:
        """Several processes on accelerator devices (not CPU processes)."""
        distributed = str(self.state.distributed_type)
        return distributed.startswith("MULTI_") and distributed != "MULTI_CPU"

    @property
    def should_save_model(self) -> bool:
        """Whether this process writes model files; a strategy that shards the model over some
        process-mesh dimensions and replicates it over others answers for itself."""
        try:
            return bool(self.run.extension_attribute("should_save_model"))
        except AttributeError:
            return True

    def _lomo_optimizers(self) -> list[Any]:
        from .utils.imports import is_lomo_available

        if not is_lomo_available():
            return []
        from lomo_optim import AdaLomo, Lomo

        return [opt for opt in self._optimizers if isinstance(getattr(opt, "optimizer", opt), (Lomo, AdaLomo))]

    @property
    def has_lomo_optimizer(self) -> bool:
        """Whether a prepared optimizer is a LOMO one (its step happens inside backward)."""
        return bool(self._lomo_optimizers())

    def lomo_backward(self, loss: Any, learning_rate: float) -> None:
        """Backward and update in one pass, through each prepared LOMO optimizer's ``fused_backward``."""
        optimizers = self._lomo_optimizers()
        if not optimizers:
            raise ConfigError("lomo_backward needs a prepared Lomo or AdaLomo optimizer (pip install lomo-optim)")
        for optimizer in optimizers:
            getattr(optimizer, "optimizer", optimizer).fused_backward(loss, learning_rate)
