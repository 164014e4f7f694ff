"""``drivetrain.checkpointing`` is :mod:`drivetrain.services.checkpointing`,
the same package, its submodules included (its place before the layers)."""

from .. import _compat

_compat.alias_package(__name__, "drivetrain.services.checkpointing")
