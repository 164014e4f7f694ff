"""The ``ddp`` strategy's role object (``run.strategy`` while DDP is the run's strategy,
``StrategySpec(hooks=...)``): the run's ``DistributedDataParallelKwargs``, the step's
synchronisation controls and the run hooks.

Cheap to import (no torch): each hook imports what it needs when called.
"""

from __future__ import annotations

from typing import Any, ContextManager

from drivetrain.plugin_api import Strategy, hookimpl

from .options import DistributedDataParallelKwargs


class DDPStrategy(Strategy):
    """DistributedDataParallel as the run's strategy.

    Attributes:
        options: the run's :class:`DistributedDataParallelKwargs` (the user's kwargs handler,
            or the defaults), resolved for each ``Accelerator``.
    """

    def __init__(self, run: Any, arguments: Any = None) -> None:
        super().__init__(run, arguments)
        self.options: DistributedDataParallelKwargs | None = None

    def configure(self, run: Any) -> DistributedDataParallelKwargs:
        self.options = run.handler_kwargs.get("DistributedDataParallelKwargs") or DistributedDataParallelKwargs()
        return self.options

    @hookimpl
    def drivetrain_configure_run(self, run):
        self.configure(run)
        return None  # nothing of Accelerate's to expose

    @hookimpl
    def drivetrain_wrap_model(self, model, run, evaluation_mode):
        if run.state.num_processes <= 1 or evaluation_mode:
            return None
        from .wrap import wrap_ddp

        return wrap_ddp(model, run, self.options or self.configure(run))

    def no_sync(self, model: Any) -> ContextManager[Any]:
        no_sync = getattr(model, "no_sync", None)
        return no_sync() if no_sync is not None else super().no_sync(model)

    @hookimpl
    def drivetrain_unwrap_model(self, model, run, keep_fp32_wrapper):
        from torch.nn.parallel import DistributedDataParallel

        return model.module if isinstance(model, DistributedDataParallel) else None

    def sync_in_backward(self, model: Any) -> ContextManager[Any]:
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(model, DistributedDataParallel):
            return super().sync_in_backward(model)
        from .wrap import sync_next_backward

        return sync_next_backward(model)
