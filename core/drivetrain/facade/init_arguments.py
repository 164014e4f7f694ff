"""``Accelerator(...)``'s general arguments, checked and turned into what the run uses: the
kwargs handlers filed by class, the precision backend their recipes name, the gradient
accumulation plugin and the dynamo plugin. Backend arguments are
:mod:`drivetrain.backend_arguments`'.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..kernel import environment
from ..kernel.errors import ConfigError
from ..runtime.kwargs_handlers import GradientAccumulationPlugin, InitProcessGroupKwargs, KwargsHandler, TorchDynamoPlugin


def file_handlers(kwargs_handlers: Sequence[KwargsHandler]) -> dict[str, KwargsHandler]:
    """The handlers by class name; refuses what is no handler and a class given twice."""
    filed: dict[str, KwargsHandler] = {}
    for handler in kwargs_handlers:
        name = type(handler).__name__
        if not isinstance(handler, KwargsHandler):
            raise ConfigError(f"kwargs_handlers takes KwargsHandler objects, not {name}")
        if name in filed:
            raise ConfigError(f"kwargs_handlers has two {name}; pass one")
        filed[name] = handler
    return filed


def state_arguments(handlers: dict[str, KwargsHandler]) -> dict[str, Any]:
    """``AcceleratorState``'s keywords from the handlers: the process group's and the precision backend."""
    init_kwargs = handlers.get("InitProcessGroupKwargs", InitProcessGroupKwargs()).to_kwargs()
    # A precision plugin's recipe handler names the backend it configures (`precision_backend`).
    backends = {h.precision_backend for h in handlers.values() if getattr(h, "precision_backend", None)}
    if len(backends) > 1:
        raise ConfigError(f"kwargs_handlers configure several precision backends ({sorted(backends)}); pass one")
    if backends:
        init_kwargs["precision_backend"] = backends.pop()
    return init_kwargs


def accumulation_plugin(steps: int, plugin: GradientAccumulationPlugin | None) -> GradientAccumulationPlugin:
    """The accumulation plugin given, or one for ``steps`` (the environment's when left at 1)."""
    if plugin is not None:
        if steps != 1:
            raise ConfigError("pass gradient_accumulation_steps or gradient_accumulation_plugin, not both")
        return plugin
    if steps == 1:
        steps = environment.read_checked("GRADIENT_ACCUMULATION_STEPS", default=1)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"gradient_accumulation_steps must be a whole number of at least 1, not {steps!r}")
    return GradientAccumulationPlugin(num_steps=steps)


def dynamo_plugin(backend: str | None, plugin: TorchDynamoPlugin | None) -> TorchDynamoPlugin | None:
    """The dynamo plugin to compile with (given, or from the backend or environment); ``None`` for none."""
    if plugin is None:
        backend = backend or environment.read("DYNAMO_BACKEND")
        plugin = TorchDynamoPlugin(backend=backend) if backend else None
    if plugin is not None and plugin.backend not in ("no", "none"):
        return plugin
    return None
