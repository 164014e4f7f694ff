"""Which machine of a multi-machine job was lost, told by the launchers themselves.

When a machine goes away, the ranks of the others fail on a broken connection or a timeout
that names an address, not a machine. Each launcher of an elastic (c10d) job bumps its own
counter in the rendezvous store every half second; after a failure, a launcher watches the
others' counters for a few seconds: a machine whose counter stands still (or, seen from the
others, machine 0, whose launcher hosts the store, when the store stops answering) is lost.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

PERIOD_S = 0.5
SETTLE_S = 3.0  # how long a counter may stand still before its machine is called lost
_KEY = "drivetrain/heartbeat/{}"


class MachineHeartbeat:
    """Bumps this machine's counter and notes when each other machine's last moved."""

    def __init__(self, host: str, port: int, machine_rank: int, num_machines: int,
                 started: Any = lambda: True) -> None:
        self.host, self.port = host, port
        self.machine_rank, self.num_machines = machine_rank, num_machines
        self.last_moved: dict[int, float] = {}
        self._counts: dict[int, int] = {}
        self.store_answered_at: float | None = None
        self._started = started  # true once the workers run: the store is up, no connection attempts before
        self._store: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drivetrain-heartbeat", daemon=True)

    def __enter__(self) -> "MachineHeartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * PERIOD_S + 2)

    def _beat(self) -> None:
        import torch.distributed as dist

        if self._store is None:
            self._store = dist.TCPStore(self.host, self.port, is_master=False, timeout=timedelta(seconds=2),
                                        wait_for_workers=False)
        now = time.monotonic()
        self._store.add(_KEY.format(self.machine_rank), 1)
        for machine in range(self.num_machines):
            if machine == self.machine_rank:
                continue
            count = self._store.add(_KEY.format(machine), 0)  # reads without waiting for the key
            if count != self._counts.get(machine):
                self._counts[machine] = count
                if count:
                    self.last_moved[machine] = now
        self.store_answered_at = now

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._started():
                try:
                    self._beat()
                except Exception:  # gone (machine 0 lost, or this launch ended): noted by store_answered_at
                    self._store = None
                    if self.store_answered_at is not None:
                        return
            self._stop.wait(PERIOD_S)

    def lost(self, settle: float = SETTLE_S) -> list[int]:
        """The machines that stopped answering: waits at most ``settle`` seconds for each to show life."""
        deadline = time.monotonic() + settle
        since = time.monotonic()  # each must show life after the failure
        while time.monotonic() < deadline:
            answered = self.store_answered_at is not None and self.store_answered_at > since
            if answered and all(self.last_moved.get(m, 0) > since for m in self._others()):
                return []
            time.sleep(PERIOD_S / 2)
        now = time.monotonic()
        store_gone = self.store_answered_at is None or now - self.store_answered_at > settle - PERIOD_S
        if store_gone and self.machine_rank != 0 and self.store_answered_at is not None:
            return [0]  # machine 0's launcher hosts the store
        if store_gone:
            return []  # this machine cannot tell (its own launch has ended, or it never reached the store)
        return [m for m in self._others() if now - self.last_moved.get(m, 0) > settle - PERIOD_S]

    def _others(self) -> list[int]:
        return [m for m in range(self.num_machines) if m != self.machine_rank]


def lost_machines_line(lost: list[int]) -> str:
    names = ", ".join(str(m) for m in lost)
    return (f"drivetrain launch: machine {names} was lost (its launcher stopped answering); the ranks of this "
            "machine failed because of it: restart that machine's `drivetrain launch`, or resume from the newest "
            "checkpoint")
