"""The types the hook specifications name, as the kernel sees them: protocols of what a hook is
given, so that ``hookspecs/`` is typed on its own layer and imports nothing above it.

The classes that satisfy them live higher up (``Run`` in ``runtime/run.py``, ``Collectives`` in
``runtime/collectives.py``, the optimizer and scheduler wrappers in ``runtime/``,
``DeferredWrites`` in ``services/checkpointing/deferred.py``, ``Accelerator`` in the facade) and
plugins import them from ``drivetrain.plugin_api``. Each protocol lists only what the hook
contract promises; the documentation of a hook says what it reads.

No torch here: the tensor types are named for type checkers only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

# The run every run hook is given is the role-owning Run of kernel/roles.py: one protocol for both.
from .roles import Run

if TYPE_CHECKING:  # pragma: no cover - names for the type hints only (a type checker's, never run)
    import torch

__all__ = ["AcceleratedOptimizer", "AcceleratedScheduler", "Accelerator", "Collectives", "CompileOptions",
           "DeferredWrites", "Run"]


class Accelerator(Protocol):
    """The ``accelerator`` argument of the hooks that see a whole ``prepare`` call or the
    ``Accelerator``'s construction (``drivetrain.Accelerator``)."""

    state: Any
    run: Run
    project_configuration: Any
    device_placement: bool

    @property
    def device(self) -> torch.device: ...

    @property
    def gradient_accumulation_steps(self) -> int: ...


class Collectives(Protocol):
    """What ``drivetrain_collectives`` returns (``drivetrain.plugin_api.Collectives``)."""

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]: ...

    def all_reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor: ...

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor: ...

    def barrier(self) -> None: ...


class AcceleratedOptimizer(Protocol):
    """A prepared optimizer (``drivetrain.plugin_api.AcceleratedOptimizer`` or a subclass)."""

    optimizer: Any  # the user's optimizer inside

    def step(self, closure: Callable[[], Any] | None = None) -> Any: ...

    def zero_grad(self, set_to_none: bool = True) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class AcceleratedScheduler(Protocol):
    """A prepared scheduler (``drivetrain.plugin_api.AcceleratedScheduler`` or a subclass)."""

    scheduler: Any  # the user's scheduler inside

    def step(self, *args: Any, **kwargs: Any) -> None: ...


class DeferredWrites(Protocol):
    """Writing a non-blocking save hands to the commit's thread
    (``drivetrain.plugin_api.DeferredWrites``)."""

    def defer(self, write: Callable[[], Any]) -> None:
        """Run ``write`` (which returns the names of the files it wrote) in the commit's thread."""


class CompileOptions(Protocol):
    """How a model is compiled (``drivetrain.plugin_api.TorchDynamoPlugin``)."""

    backend: Any
    mode: str | None

    def to_kwargs(self) -> dict[str, Any]: ...
