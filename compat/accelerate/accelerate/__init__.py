"""``accelerate`` is drivetrain: importing it installs the alias and puts drivetrain in its place.

After ``import accelerate``, ``sys.modules["accelerate"]`` is the ``drivetrain`` package itself,
and every ``accelerate.X`` module is the module object ``drivetrain.X`` (see
:mod:`drivetrain_accelerate_alias`).
"""

import sys

from drivetrain_accelerate_alias import install

# The import system returns what the module left in sys.modules under its name.
sys.modules[__name__] = install()
