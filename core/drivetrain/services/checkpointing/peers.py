"""The waits of a save, a load and a commit on the other processes, each bounded by the run's
collective timeout and failing with one line that says what to do.

A collective a peer never joins fails after the process group's timeout with the backend's
own words ("Timed out waiting 15000ms for send operation"), which name neither the
checkpoint nor the fix. The launcher's report names the rank that stopped answering; this
line tells the user where to look and which timeout bounded the wait.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...kernel.errors import CheckpointError

if TYPE_CHECKING:  # pragma: no cover
    from ...runtime.state import PartialState

FIX = ("look at the rank the launcher names (stopped, hung or crashed), or raise the timeout if it was only busy "
       "(InitProcessGroupKwargs(timeout=...), or `drivetrain launch --timeout`)")


def timeout_seconds(state: PartialState) -> float:
    return state.collective_timeout.total_seconds()


def _failed(state: PartialState, action: str, error: BaseException) -> CheckpointError:
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return CheckpointError(f"{action}: rank {state.process_index} waited for the other processes and one did not "
                           f"answer within the run's collective timeout ({timeout_seconds(state):g} s): {first}; {FIX}")


def gather(state: PartialState, obj: Any, action: str) -> list[Any]:
    """Every process's ``obj`` (all ranks call it); a peer that never answers is a CheckpointError."""
    try:
        return state.collectives.all_gather_object(obj)
    except CheckpointError:
        raise
    except Exception as error:  # the backend's timeout or broken connection: a peer is gone
        raise _failed(state, action, error) from error


def barrier(state: PartialState, action: str) -> None:
    """``wait_for_everyone`` with the same one-line failure as :func:`gather`."""
    try:
        state.wait_for_everyone()
    except CheckpointError:
        raise
    except Exception as error:
        raise _failed(state, action, error) from error
