"""Launched on 2 processes to fail on purpose.

``crash``: rank 1 raises. ``hang SECONDS``: rank 1 never joins a barrier; rank 0 waits in it
until the process group's timeout (InitProcessGroupKwargs(timeout=SECONDS)) ends the wait.
``hang-launch-timeout``: the same, with the timeout given to `drivetrain launch --timeout`.
"""

from __future__ import annotations

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

if mode == "crash":
    if state.process_index == 1:
        raise ValueError("rank 1 crashed on purpose")
    state.wait_for_everyone()
else:
    if state.process_index == 1:
        time.sleep(600)  # never joins: only the timeout can end rank 0's wait
    state.wait_for_everyone()
print("UNREACHABLE", flush=True)
