"""``python -m drivetrain`` is the ``drivetrain`` command."""

import sys

from .cli.main import main

sys.exit(main())
