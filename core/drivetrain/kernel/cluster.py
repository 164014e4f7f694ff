"""Where this process sits among its peers, as told by whatever started it.

A cluster-environment plugin's factory returns a :class:`ClusterEnvironment`; the core reads
ranks and the rendezvous address from it and never looks at a launcher's variables itself.
"""

from __future__ import annotations

import os
from typing import Mapping

from .errors import ConfigError
from .records import FrozenRecord, frozen_record


@frozen_record
class ClusterEnvironment(FrozenRecord):
    """The position of this process in its job.

    Attributes:
        name: the environment's name (``"torchelastic"``).
        world_size: number of processes in the job.
        rank: this process's global index.
        local_rank: its index on this machine.
        local_world_size: processes on this machine.
        node_rank: this machine's index.
        num_nodes: number of machines.
        master_addr: host of the rank-0 process, for the rendezvous.
        master_port: its port.
    """

    name: str
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    num_nodes: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 29500

    def __post_init__(self) -> None:
        # Checked here, where every cluster-environment plugin's answer passes: a rank outside
        # the job would wait for peers that never come, a negative size would start nothing.
        problem = None
        if self.world_size < 1:
            problem = f"world size {self.world_size} is not at least 1"
        elif not 0 <= self.rank < self.world_size:
            problem = f"rank {self.rank} is outside 0..{self.world_size - 1} (world size {self.world_size})"
        elif self.local_rank < 0 or self.local_world_size < 1:
            problem = f"local rank {self.local_rank} of {self.local_world_size} local processes is impossible"
        elif self.num_nodes < 1:
            problem = f"{self.num_nodes} machines is not at least 1"
        elif not 0 <= self.master_port < 65536:
            problem = f"port {self.master_port} is not a port number"
        if problem:
            raise ConfigError(f"{self.name} environment: {problem}; fix the variables that started this process "
                              "(RANK, WORLD_SIZE, LOCAL_RANK, ... or the scheduler's own) or unset them")

    def torch_env(self) -> dict[str, str]:
        """The variables torch.distributed's ``env://`` rendezvous reads."""
        return {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }

    def export(self, environ: dict[str, str] | None = None) -> None:
        """Set :meth:`torch_env` in ``environ`` (``os.environ``) without overriding what is set."""
        environ = os.environ if environ is None else environ
        for key, value in self.torch_env().items():
            environ.setdefault(key, value)


SINGLE_PROCESS = ClusterEnvironment(name="single-process")


def int_var(env: Mapping[str, str], *names: str, default: int | None = None) -> int | None:
    """The first of ``names`` set in ``env``, as an int; a ``ConfigError`` naming the variable
    when it holds something else."""
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise ConfigError(f"{name}={value!r} is not a whole number; fix or unset {name}") from None
    return default
