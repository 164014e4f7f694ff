"""The process ``drivetrain launch --tpu`` starts: imports the script and runs its main
function through ``xmp.spawn``, once per replica.

    python -m drivetrain_xla.spawn --function main --nprocs N (--script FILE | --module NAME) [args...]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from typing import Any, Callable, Sequence


def load_function(target: str, is_module: bool, function: str) -> Callable[..., Any]:
    """The function ``function`` of the script file or module ``target`` (imported under a name
    of its own, so its ``if __name__ == "__main__"`` block does not run)."""
    if is_module:
        module = importlib.import_module(target)
    else:
        path = os.path.abspath(target)
        sys.path.insert(0, os.path.dirname(path))
        spec = importlib.util.spec_from_file_location("__drivetrain_xla_main__", path)
        if spec is None or spec.loader is None:
            raise SystemExit(f"drivetrain launch --tpu: cannot import {target}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    found = getattr(module, function, None)
    if not callable(found):
        raise SystemExit(f"drivetrain launch --tpu: {target} has no function {function!r}; name the one to run "
                         "with --main-training-function (main_training_function: in the config file)")
    return found


class _Replica:
    """What each replica runs (picklable: a spawned process imports the script again)."""

    def __init__(self, target: str, is_module: bool, function: str, argv: list[str]) -> None:
        self.target, self.is_module, self.function, self.argv = target, is_module, function, argv

    def __call__(self, index: int) -> None:
        sys.argv = [self.target, *self.argv]
        load_function(self.target, self.is_module, self.function)()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="drivetrain_xla.spawn")
    parser.add_argument("--function", default="main")
    parser.add_argument("--nprocs", type=int, default=1)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--script")
    target.add_argument("--module")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    import torch_xla.distributed.xla_multiprocessing as xmp

    replica = _Replica(options.script or options.module, options.module is not None, options.function,
                       list(options.args))
    # torch_xla spawns one process per device by itself (nprocs=None) or runs here (nprocs=1)
    xmp.spawn(replica, args=(), nprocs=1 if options.nprocs <= 1 else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
