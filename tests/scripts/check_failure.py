"""Launched on 2 processes to fail on purpose.

``crash``: rank 1 raises. ``hang SECONDS``: rank 1 never joins a barrier; rank 0 waits in it
until the process group's timeout (InitProcessGroupKwargs(timeout=SECONDS)) ends the wait.
``hang-launch-timeout``: the same, with the timeout given to `drivetrain launch --timeout`.
``exit``: rank 1 writes a line to stderr and leaves with ``os._exit(3)`` (no exception, no
record); rank 0's next collective then breaks. ``sleep``: every rank says STARTED and sleeps
(the launcher is stopped by a signal); a second argument only tells test runs apart.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

from drivetrain import InitProcessGroupKwargs, PartialState

mode = sys.argv[1]
if mode == "hang":
    state = PartialState(**InitProcessGroupKwargs(timeout=timedelta(seconds=float(sys.argv[2]))).to_kwargs())
else:
    state = PartialState()
state.wait_for_everyone()  # both are up

if mode == "sleep":
    # one write per line: both ranks share the launcher's stdout, and pieces would interleave
    sys.stdout.write(f"STARTED {state.process_index}\n")
    sys.stdout.flush()
    time.sleep(300)
elif mode == "exit":
    if state.process_index == 1:
        print("fatal: rank 1 found the disk full", file=sys.stderr, flush=True)
        os._exit(3)
    state.wait_for_everyone()
elif mode == "crash":
    if state.process_index == 1:
        raise ValueError("rank 1 crashed on purpose")
    state.wait_for_everyone()
else:
    if state.process_index == 1:
        time.sleep(600)  # never joins: only the timeout can end rank 0's wait
    state.wait_for_everyone()
print("UNREACHABLE", flush=True)
