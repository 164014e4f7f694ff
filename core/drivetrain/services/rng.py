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

from ..kernel.errors import ConfigError
from ..runtime.state import PartialState
from ..kernel.contributed import surface_getattr

logger = logging.getLogger("drivetrain.utils.random")  # its name before the layers, kept for log filters


def _platform() -> Any:
    return PartialState._shared_state.get("platform")


#: The plugin manager last asked and the platform objects of its usable platforms: ``set_seed``
#: before any state exists seeds them all (probing once per manager). The manager itself is kept,
#: not its ``id``, which a later manager may reuse.
_usable_platforms: tuple[Any, list[Any]] | None = None


def usable_platforms() -> list[Any]:
    """A platform object for each platform whose probe says it is usable in this process.

    What ``set_seed`` seeds when it is called before the process state exists (a script
    seeds first and builds its ``Accelerator`` afterwards): the platform the state will
    choose is among them, whichever it is. A platform whose factory cannot be loaded is
    skipped with a warning (selecting it later says what to fix).
    """
    from ..selection.detection import probe_all
    from ..kernel.plugin_manager import get_plugin_manager

    global _usable_platforms
    manager = get_plugin_manager()
    if _usable_platforms is None or _usable_platforms[0] is not manager:
        found: list[Any] = []
        for candidate in probe_all(manager, "drivetrain_register_platforms", "platform"):
            if not candidate.available:
                continue
            try:
                found.append(manager.resolve_factory(candidate.plugin, candidate.spec,
                                                     f"platform {candidate.name!r}")())
            except Exception as error:  # seeding must not fail for a platform nobody chose
                logger.warning("%s; its generator is not seeded", error)
        _usable_platforms = (manager, found)
    return _usable_platforms[1]


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed Python's ``random``, NumPy, torch and the platform's device generators.

    The device generators seeded are the run's platform's once the process state exists,
    and otherwise those of every platform usable here (:func:`usable_platforms`), so seeding
    before building the ``Accelerator`` seeds the device it will choose.

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
    for device_platform in [platform] if platform is not None else usable_platforms():
        device_platform.manual_seed_all(seed)
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
        from ..selection.enums import RNGType

        known = RNGType.values()
        if rng_type not in known:
            raise ConfigError(f"unknown random generator type {rng_type!r}; use one of {', '.join(known)}")
        logger.warning("rng type %r is not this run's platform (%s); it is not synchronised", rng_type, platform.name)


def synchronize_rng_states(rng_types: Iterable[str], generator: torch.Generator | None = None) -> None:
    """:func:`synchronize_rng_state` for each type of ``rng_types``."""
    for rng_type in rng_types:
        synchronize_rng_state(rng_type, generator=generator)


__all__ = ["set_seed", "synchronize_rng_state", "synchronize_rng_states"]


# names a plugin contributes to this module (keys "utils.random.<name>"), served on first access
__getattr__ = surface_getattr("drivetrain.utils.random")
