"""``accelerate.commands.accelerate_cli``: the module behind Accelerate's ``accelerate`` command.

Its ``main()`` (reading ``sys.argv``) is the ``drivetrain`` command's; ``python -m`` runs it.
"""

from __future__ import annotations

import sys

from ..cli.main import main as _drivetrain_main


def main() -> int:
    """The ``accelerate``/``drivetrain`` command with this process's command line."""
    return _drivetrain_main()


if __name__ == "__main__":
    sys.exit(main())
