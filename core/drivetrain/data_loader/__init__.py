"""``drivetrain.data_loader`` is :mod:`drivetrain.services.data_loader`,
the same package, its submodules included (its place before the layers)."""

from .. import _compat

_compat.alias_package(__name__, "drivetrain.services.data_loader")
