"""``accelerate``, served by drivetrain.

Every submodule ``accelerate.X`` is drivetrain's module object ``drivetrain.X`` (see
:mod:`drivetrain_accelerate_alias`), and every top-level name is drivetrain's
(``accelerate.Accelerator is drivetrain.Accelerator``). The package itself is a thin module of
its own only so that ``accelerate.__version__`` can say which Accelerate API this is: libraries
compare it with the Accelerate release that brought a feature, and drivetrain's own version
means nothing to them.
"""

from typing import Any

from drivetrain_accelerate_alias import install

# The version of this distribution (pyproject.toml): the Accelerate API it implements, labelled.
__version__ = "1.15.0+drivetrain"

_drivetrain = install()


def __getattr__(name: str) -> Any:
    # Looked up each time, not copied: what drivetrain offers (and any patch of it) shows here.
    return getattr(_drivetrain, name)


def __dir__() -> list:
    return sorted(set(globals()) | set(dir(_drivetrain)))
