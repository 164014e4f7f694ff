"""Launched on 2 processes to fail on purpose.

``crash``: rank 1 raises. ``hang SECONDS DIR``: rank 1 is stopped (SIGSTOP) inside
``save_state(DIR)``, while it syncs its files; rank 0's save returns, its commit waits for rank
1's files and its next ``wait_for_everyone`` for rank 1 itself, both until the process group's
timeout (InitProcessGroupKwargs(timeout=SECONDS)). ``hang-launch-timeout``: rank 1 is stopped
(SIGSTOP) after the last collective and rank 0 ends its script normally; only the launcher can
end rank 1, after the timeout given to `drivetrain launch --timeout`. ``exit``: rank 1 writes a line to stderr and leaves with ``os._exit(3)`` (no
exception, no record); rank 0's next collective then breaks. ``leave``: rank 1's script ends
(exit code 0) without the collective rank 0 then enters. ``sleep``: every rank says
``STARTED <rank> <pid>`` and sleeps (the launcher is stopped by a signal); a second argument
only tells test runs apart. ``deaf``: as ``sleep``, ignoring SIGTERM and SIGUSR1 (a worker
that does not end when the launcher passes a signal on).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

from drivetrain import InitProcessGroupKwargs, PartialState

mode = sys.argv[1]
if mode == "hang":
    import signal

    import torch

    from drivetrain import Accelerator
    from drivetrain.checkpointing import commit

    accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=float(sys.argv[2])))])
    state = accelerator.state
    accelerator.prepare(torch.nn.Linear(2, 2))
    if state.process_index == 1:
        os.environ["DRIVETRAIN_CHECKPOINT_BACKGROUND"] = "0"  # the commit runs, and stops, inside save_state
        commit.sync_files = lambda *args: os.kill(os.getpid(), signal.SIGSTOP)
    accelerator.save_state(sys.argv[3])
    accelerator.wait_for_everyone()
    print("UNREACHABLE", flush=True)
    sys.exit(0)
state = PartialState()
state.wait_for_everyone()  # both are up

if mode == "deaf":
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    mode = "sleep"
if mode == "sleep":
    # one write per line: both ranks share the launcher's stdout, and pieces would interleave
    sys.stdout.write(f"STARTED {state.process_index} {os.getpid()}\n")
    sys.stdout.flush()
    time.sleep(300)
elif mode == "exit":
    if state.process_index == 1:
        print("fatal: rank 1 found the disk full", file=sys.stderr, flush=True)
        os._exit(3)
    state.wait_for_everyone()
elif mode == "leave":
    if state.process_index == 1:
        sys.exit(0)
    state.wait_for_everyone()
elif mode == "crash":
    if state.process_index == 1:
        raise ValueError("rank 1 crashed on purpose")
    state.wait_for_everyone()
else:
    if state.process_index == 1:
        import signal

        os.kill(os.getpid(), signal.SIGSTOP)  # nobody continues it
        print("UNREACHABLE", flush=True)
    sys.exit(0)
print("UNREACHABLE", flush=True)
