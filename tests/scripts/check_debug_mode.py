"""Launched on 2 processes with DRIVETRAIN_DEBUG_MODE=1: a gather whose shapes differ by rank.

Debug mode must turn it into an error on both ranks, naming each rank's shape, instead of a
hang. Prints how long the failing call took before raising.
"""

from __future__ import annotations

import sys
import time

import torch

from drivetrain.state import PartialState
from drivetrain.utils import gather

state = PartialState()
assert state.debug, "DRIVETRAIN_DEBUG_MODE=1 did not reach PartialState().debug"
start = time.monotonic()
try:
    gather({"logits": torch.ones(2 + state.process_index, 5)})
finally:
    print(f"rank {state.process_index} left gather after {time.monotonic() - start:.2f}s", file=sys.stderr, flush=True)
