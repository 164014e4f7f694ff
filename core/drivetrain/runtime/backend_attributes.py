"""Accelerate's attributes of a backend on ``Accelerator``, ``AcceleratorState`` and ``GradientState``.

A script written for Accelerate reads ``accelerator.deepspeed_plugin``, ``state.is_fsdp2``
or ``accelerator.torch_device_mesh``. The core names no backend, so these attributes are not
members of the classes: each class's ``__getattr__`` is this one look-up, which asks, in order,

1. the run's extension objects: what the active plugins returned from
   ``drivetrain_configure_run`` (a strategy's role object answers the names in its
   ``exposes``), through :meth:`drivetrain.run.Run.extension_attribute`;
2. contributed names: first the owner's backend arguments (``argument``: for the
   ``Accelerator`` and ``AcceleratorState``, the backend objects given by keyword and every
   ``<backend>_plugin`` argument an installed strategy declares, ``None`` unless given, see
   :func:`drivetrain.backend_arguments.strategy_option_attributes`), then the public names
   plugins contribute as ``<module>.<Class>.<name>`` (``accelerator.Accelerator.is_fsdp2``:
   what the attribute reads while that backend is unused).

Anything else is an ``AttributeError`` naming the class.
"""

from __future__ import annotations

from typing import Any, Callable

from ..kernel.contributed import resolve_module_name
from .run import Run


def backend_attribute(contributed_as: str, name: str, run: Run | None,
                      argument: Callable[[str], Any] | None = None, owner: str | None = None) -> Any:
    """The attribute ``name`` of a backend, for the class whose public names sit under
    ``contributed_as`` (``"accelerator.Accelerator"``).

    ``argument(name)`` answers the owner's backend arguments (``AttributeError`` for a name
    that is none); it is asked only after the run's extensions missed. Names starting with
    ``_`` are never a backend's. ``owner`` names the class in the error (the subclass's name).
    """
    if not name.startswith("_"):
        for look_up in (run.extension_attribute if run is not None else None, argument,
                        lambda attribute: resolve_module_name(contributed_as, attribute)):
            if look_up is None:
                continue
            try:
                return look_up(name)
            except AttributeError:
                pass
    raise AttributeError(f"{owner or contributed_as.rpartition('.')[2]!r} object has no attribute {name!r}")
