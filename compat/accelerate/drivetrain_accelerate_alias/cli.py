"""The ``accelerate`` commands: drivetrain's, after checking that no real Accelerate is beside them."""

from __future__ import annotations

import sys
from typing import Callable

from . import conflict_message, install, real_accelerate


def _run(entry: str, *subcommand: str) -> Callable[[], int]:
    def command() -> int:
        found = real_accelerate()
        if found is not None:
            print(f"error: {conflict_message(found)}", file=sys.stderr)
            return 1
        try:
            install()  # scripts run in this process (debug launches) import `accelerate` too
        except ImportError as error:  # drivetrain missing, or a wheel built for another environment
            print(f"error: {error}", file=sys.stderr)
            return 1
        module_name, _, function = entry.partition(":")
        module = __import__(module_name, fromlist=[function])
        if subcommand:
            return getattr(module, function)([*subcommand, *sys.argv[1:]])
        return getattr(module, function)()

    return command


main = _run("drivetrain.cli.main:main")
launch_main = _run("drivetrain.cli.main:launch_main")
config_main = _run("drivetrain.cli.main:config_main")
estimate_main = _run("drivetrain.commands.estimate:main")
merge_weights_main = _run("drivetrain.cli.main:main", "merge-weights")
