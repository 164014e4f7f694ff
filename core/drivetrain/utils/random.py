"""Seeding and synchronising random number generators across processes.

The generators are named as in :class:`drivetrain.enums.RNGType`: ``"torch"`` (the global
CPU generator), ``"generator"`` (a ``torch.Generator`` you pass) and the name of the run's
platform for its device generator (``"cuda"`` on a CUDA run, say), which the core reaches
through the platform object only.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Iterable

import torch

from ..errors import ConfigError
from ..state import PartialState

logger = logging.getLogger(__name__)


def _platform() -> Any:
    return PartialState._shared_state.get("platform")


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed Python's ``random``, NumPy, torch and the platform's device generators.

    Args:
        seed: the seed.
        device_specific: add the process index to ``seed``, so each process draws
            differently (the process state is created if needed).
        deterministic: also ask torch for deterministic algorithms
            (``torch.use_deterministic_algorithms(True)``).
    """
    if device_specific:
        seed += PartialState().process_index
    random.seed(seed)
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    else:
        numpy.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    platform = _platform()
    if platform is not None:
        platform.manual_seed_all(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)


def _broadcast_state(state: Any, collectives: Any, device: torch.device) -> Any:
    """Process 0's generator state on every process."""
    if isinstance(state, torch.Tensor):
        on_device = state.to(device)
        collectives.broadcast(on_device, src=0)
        return on_device.to(state.device)
    return collectives.broadcast_object_list([state], src=0)[0]


def synchronize_rng_state(rng_type: str | None = None, generator: torch.Generator | None = None) -> None:
    """Give every process the state that process 0's generator ``rng_type`` has.

    Args:
        rng_type: ``"torch"`` (the default), ``"generator"``, or the platform's name for its
            device generator. Another installed platform's name is skipped with a warning
            (it is not the device of this run).
        generator: the ``torch.Generator`` synchronised by ``"generator"``.
    """
    rng_type = str(getattr(rng_type, "value", rng_type) or "torch").lower()
    state = PartialState()
    collectives = state.collectives
    platform = state.platform
    if rng_type == "torch":
        if collectives.world_size > 1:
            torch.set_rng_state(_broadcast_state(torch.get_rng_state(), collectives, state.device))
    elif rng_type == "generator":
        if generator is None:
            raise ConfigError("synchronize_rng_state('generator') needs the generator: pass generator=...")
        if collectives.world_size > 1:
            generator.set_state(_broadcast_state(generator.get_state(), collectives, state.device))
    elif rng_type == platform.name:
        device_state = platform.get_rng_state()
        if device_state is not None and collectives.world_size > 1:
            platform.set_rng_state(_broadcast_state(device_state, collectives, state.device))
    else:
        from ..enums import RNGType

        known = RNGType.values()
        if rng_type not in known:
            raise ConfigError(f"unknown random generator type {rng_type!r}; use one of {', '.join(known)}")
        logger.warning("rng type %r is not this run's platform (%s); it is not synchronised", rng_type, platform.name)


def synchronize_rng_states(rng_types: Iterable[str], generator: torch.Generator | None = None) -> None:
    """:func:`synchronize_rng_state` for each type of ``rng_types``."""
    for rng_type in rng_types:
        synchronize_rng_state(rng_type, generator=generator)


__all__ = ["set_seed", "synchronize_rng_state", "synchronize_rng_states"]
