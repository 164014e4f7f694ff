"""DeepSpeed's CPU ops for the tests: where they are built, and the build itself.

``python tests/deepspeed_ops.py`` builds them before a run (the README's test command does, so
the suite's time is its own: a fresh machine compiles for about 3 minutes of 2 cores, once).
``conftest.py`` runs this same file in the background when a session needs the ops and they
are missing. Built already, it only loads them (seconds); without DeepSpeed it does nothing.
"""

from __future__ import annotations

import fcntl
import glob
import importlib.util
import os
import sys
import time

#: Where they are built, once for every test and every checkout on this machine (unless
#: TORCH_EXTENSIONS_DIR is set): ``drivetrain/torch_extensions`` in the user's cache.
EXTENSIONS = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "drivetrain", "torch_extensions")
#: Under the build's flock, a torch lock file older than this is a leftover.
STALE_LOCK_S = 600
#: The ops a DeepSpeed run on CPU processes compiles: its shared-memory collective, and CPU
#: Adam for optimizer states offloaded to the CPU.
OPS = ("ShareMemCommBuilder", "CPUAdamBuilder")


def build(root: str = EXTENSIONS) -> None:
    """Build (or load) :data:`OPS` into ``root``, one build on this machine at a time."""
    os.makedirs(root, exist_ok=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = root
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # the tests run DeepSpeed on CPU processes
    with open(os.path.join(root, ".build.flock"), "w") as guard:
        # torch's build lock is a plain file: a process killed while building or loading leaves
        # it, and every later load waits on it forever. Builds are serialised by this flock
        # (released by the kernel when its holder dies), so an old torch lock is a leftover.
        fcntl.flock(guard, fcntl.LOCK_EX)
        for lock in glob.glob(os.path.join(root, "*", "lock")):
            if time.time() - os.stat(lock).st_mtime > STALE_LOCK_S:
                os.unlink(lock)
        from deepspeed.accelerator import get_accelerator

        for name in OPS:
            get_accelerator().create_op_builder(name).load(verbose=False)


def main() -> None:
    if importlib.util.find_spec("deepspeed") is None:
        print("deepspeed is not installed: no DeepSpeed ops to build")
        return
    started = time.monotonic()
    build()
    print(f"DeepSpeed's CPU ops ready in {EXTENSIONS} ({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
