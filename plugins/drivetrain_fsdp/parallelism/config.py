"""The user's ND-parallel layout: ``ParallelismConfig`` and its handlers, with Accelerate's names.

A run is split over a device mesh of ``dp_replicate × dp_shard × cp × tp`` processes:

``dp_replicate``
    replicas that each hold the whole (sharded) model and average their gradients (the
    outer dimension of hybrid sharding, HSDP);
``dp_shard``
    processes that shard parameters, gradients and optimizer state (FSDP2);
``cp``
    processes that split each sequence (context parallelism; also sharded over by FSDP2);
``tp``
    processes that split each layer's weights (tensor parallelism).

Sizes not given are read from ``PARALLELISM_CONFIG_<DIM>_SIZE`` (or drivetrain's
``DRIVETRAIN_PARALLELISM_CONFIG_<DIM>_SIZE``), which ``drivetrain launch`` sets from the
``parallelism_config:`` block of the config file and its ``--parallelism-config-*`` options,
then default to 1. This module does not import torch: the launcher checks the layout with it
before starting any process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from drivetrain.plugin_api import ConfigError, environment

from .option_names import CP_COMM_STRATEGIES, ENV, SP_BACKENDS, SP_HANDLER_FIELDS

#: Mesh dimensions, outermost first (the order ranks are laid out in).
DIMENSIONS = ("dp_replicate", "dp_shard", "cp", "tp")

#: The earliest versions in which torch (and transformers' ``tp_plan``) offer what a layout needs:
#: tensor parallelism (``parallelize_module`` with transformers' plans) and context parallelism
#: (``torch.distributed.tensor.experimental.context_parallel``). Accelerate's names for them,
#: contributed as ``utils.constants.<name>``.
BETA_TP_AVAILABLE_PYTORCH_VERSION = "2.3.0"
BETA_TP_AVAILABLE_TRANSFORMERS_VERSION = "4.52.0"
BETA_CP_AVAILABLE_PYTORCH_VERSION = "2.6.0"


def _read(variable: str, env: Mapping[str, str] | None) -> str | None:
    value = environment.read_pair(environment.own_name(variable), variable, env=env,
                                  meaning=lambda text: text.strip().lower())
    return None if value is None or not value.strip() else value.strip()


def _size(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f"ParallelismConfig({name}=...) must be a whole number of processes, not {value!r}")
    try:
        size = int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not a whole number of processes") from None
    if size < 1:
        raise ConfigError(f"{name} must be at least 1, got {size}")
    return size


@dataclass
class TorchTensorParallelConfig:
    """Options of the tensor-parallel dimension.

    Attributes:
        enable_async_tp: overlap TP's collectives with its matrix products (torch's
            asynchronous TP; needs an accelerator, refused on the CPU).
        tp_plan: how to split the model's layers, ``{module name pattern: style}``, where a
            style is a torch ``ParallelStyle`` or one of transformers' names (``"colwise"``,
            ``"rowwise"``, ``"colwise_gather_output"``, ``"embedding_rowwise"``, ...). Default:
            the model's own plan (the ``_tp_plan`` / ``tp_plan`` transformers models carry).
    """

    enable_async_tp: bool = False
    tp_plan: dict[str, Any] | None = None


@dataclass
class TorchContextParallelConfig:
    """Options of the context-parallel dimension.

    Attributes:
        cp_comm_strategy: how the shards of keys and values travel between the processes of
            a sequence: ``"allgather"`` (gathered once per attention call) or ``"alltoall"``
            (passed round the ring).
    """

    cp_comm_strategy: str = "allgather"

    def __post_init__(self) -> None:
        strategy = str(self.cp_comm_strategy).strip().lower()
        if strategy not in CP_COMM_STRATEGIES:
            # the text starts as Accelerate's does: users' log filters and tests match on it
            raise ConfigError(f"Invalid cp_comm_strategy: {self.cp_comm_strategy}; use one of "
                              f"{list(CP_COMM_STRATEGIES)}")
        self.cp_comm_strategy = strategy


@dataclass
class TorchTensorParallelPlugin:
    """Tensor parallelism alone (Accelerate's older interface): ``tp_size`` processes split
    each layer, the others replicate. Equivalent to ``ParallelismConfig(tp_size=tp_size)``
    with the remaining processes as ``dp_replicate``."""

    tp_size: int = 1
    torch_device_mesh: Any = None

    def __post_init__(self) -> None:
        self.tp_size = _size(self.tp_size, "tp_size")


@dataclass
class ParallelismConfig:
    """How the processes of a run are laid out: ``dp_replicate × dp_shard × cp × tp``.

    The product of the sizes must be the number of processes. ``Accelerator(parallelism_config=
    ParallelismConfig(dp_shard_size=2, tp_size=2))`` on 4 processes shards the model over 2
    processes and splits each layer over the other 2.
    """

    dp_replicate_size: int | None = None
    dp_shard_size: int | None = None
    tp_size: int | None = None
    cp_size: int | None = None
    tp_handler: TorchTensorParallelConfig | None = None
    cp_handler: TorchContextParallelConfig | None = None
    sp_size: int | None = None
    sp_backend: str | None = None
    sp_handler: Any = None
    device_mesh: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._apply_environment(None)

    def _apply_environment(self, env: Mapping[str, str] | None) -> None:
        for name in ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size"):
            value = getattr(self, name)
            if value is None:
                value = _read(ENV[name], env) or 1
            setattr(self, name, _size(value, name))
        if self.tp_handler is not None and not isinstance(self.tp_handler, TorchTensorParallelConfig):
            raise ConfigError(f"tp_handler must be a TorchTensorParallelConfig, not {type(self.tp_handler).__name__}")
        if self.cp_handler is not None and not isinstance(self.cp_handler, TorchContextParallelConfig):
            raise ConfigError(f"cp_handler must be a TorchContextParallelConfig, not {type(self.cp_handler).__name__}")
        if self.cp_handler is None and self.cp_enabled:
            strategy = _read(ENV["cp_comm_strategy"], env)
            self.cp_handler = TorchContextParallelConfig(**({"cp_comm_strategy": strategy} if strategy else {}))
        if self.tp_handler is None and self.tp_enabled:
            self.tp_handler = TorchTensorParallelConfig()
        if self.cp_handler is not None and not self.cp_enabled:
            raise ConfigError("cp_handler was given but cp_size is 1; set cp_size above 1 or drop cp_handler")
        if self.tp_handler is not None and not self.tp_enabled and self.tp_handler.tp_plan is None:
            raise ConfigError("tp_handler was given but tp_size is 1; set tp_size above 1 or drop tp_handler")
        if self.sp_backend is None:
            self.sp_backend = _read(ENV["sp_backend"], env) or SP_BACKENDS[0]
        self.sp_backend = str(self.sp_backend).strip().lower()
        if self.sp_backend not in SP_BACKENDS:
            raise ConfigError(f"sp_backend {self.sp_backend!r} is not one of {list(SP_BACKENDS)}")
        if self.sp_enabled and (self.tp_enabled or self.cp_enabled):
            raise ConfigError("sequence parallelism (sp_size > 1) composes with data parallelism only; set tp_size and "
                              "cp_size to 1")

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> "ParallelismConfig":
        """The layout the variables in ``env`` describe (what a launched process reads)."""
        config = cls.__new__(cls)
        config.dp_replicate_size = config.dp_shard_size = config.tp_size = config.cp_size = config.sp_size = None
        config.tp_handler = config.cp_handler = config.device_mesh = config.sp_backend = config.sp_handler = None
        config._apply_environment(env)
        return config

    # ------------------------------------------------------------- sizes

    def size_of(self, dimension: str) -> int:
        return getattr(self, f"{dimension}_size")

    @property
    def total_size(self) -> int:
        return math.prod(self.size_of(d) for d in DIMENSIONS) * self.sp_size

    @property
    def data_parallel_size(self) -> int:
        """Processes that see different batches: ``dp_replicate × dp_shard``."""
        return self.dp_replicate_size * self.dp_shard_size

    @property
    def non_data_parallel_size(self) -> int:
        """Processes that see the same batch: ``tp × cp``."""
        return self.tp_size * self.cp_size

    @property
    def dp_replicate_enabled(self) -> bool:
        return self.dp_replicate_size > 1

    @property
    def dp_shard_enabled(self) -> bool:
        return self.dp_shard_size > 1

    @property
    def tp_enabled(self) -> bool:
        return self.tp_size > 1

    @property
    def cp_enabled(self) -> bool:
        return self.cp_size > 1

    @property
    def sp_enabled(self) -> bool:
        """Whether sequences are split over ``sp_size`` processes (DeepSpeed's Ulysses)."""
        return self.sp_size > 1

    @property
    def fsdp_enabled(self) -> bool:
        """Whether parameters are sharded (over ``dp_shard`` and ``cp``)."""
        return self.dp_shard_enabled or self.cp_enabled

    @property
    def dp_enabled(self) -> bool:
        return self.dp_replicate_enabled or self.dp_shard_enabled

    # ------------------------------------------------------------- mesh names

    @property
    def active_mesh_dims(self) -> list[str]:
        return [d for d in DIMENSIONS if self.size_of(d) > 1]

    @property
    def dp_dim_names(self) -> list[str]:
        return [d for d in ("dp_replicate", "dp_shard") if self.size_of(d) > 1]

    @property
    def non_dp_dim_names(self) -> list[str]:
        return [d for d in ("cp", "tp") if self.size_of(d) > 1]

    @property
    def dp_shard_cp_dim_names(self) -> list[str]:
        return [d for d in ("dp_shard", "cp") if self.size_of(d) > 1]

    @property
    def dp_cp_dim_names(self) -> list[str]:
        return [d for d in ("dp_replicate", "dp_shard", "cp") if self.size_of(d) > 1]

    @property
    def fsdp_dim_names(self) -> list[str]:
        """The mesh dimensions FSDP2 runs over: replicas (HSDP) and the flattened shard group."""
        names = ["dp_replicate"] if self.dp_replicate_enabled else []
        return names + (["dp_shard_cp"] if self.fsdp_enabled else [])

    # ------------------------------------------------------------- checks and the mesh

    def validate(self, num_processes: int) -> None:
        """Refuse a layout that does not cover ``num_processes`` exactly."""
        if self.total_size != num_processes:
            sp = f" × sp_size={self.sp_size}" if self.sp_enabled else ""
            raise ConfigError(
                f"ParallelismConfig dp_replicate_size={self.dp_replicate_size} × dp_shard_size={self.dp_shard_size} × "
                f"cp_size={self.cp_size} × tp_size={self.tp_size}{sp} = {self.total_size} processes, but the run has "
                f"{num_processes}; change the sizes so their product is {num_processes}")

    def _get_mesh(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """Names and sizes of the mesh's dimensions: those larger than 1, outermost first
        (``((), ())`` when every size is 1)."""
        names = tuple(self.active_mesh_dims)
        return names, tuple(self.size_of(d) for d in names)

    #: Flattened dimensions of the built mesh, each over the enabled dimensions it joins.
    _FLATTENED = (("dp", "dp_dim_names"), ("dp_shard_cp", "dp_shard_cp_dim_names"), ("dp_cp", "dp_cp_dim_names"))

    def build_device_mesh(self, device_type: str) -> Any:
        """The ``DeviceMesh`` of the dimensions larger than 1 (as Accelerate lays it out), with
        the flattened ``dp``, ``dp_shard_cp`` and ``dp_cp`` of those that are enabled; ``None``
        when every size is 1 (one process: nothing to lay out)."""
        from torch.distributed.device_mesh import init_device_mesh

        names, shape = self._get_mesh()
        self._flattened = {}
        if not names:
            self.device_mesh = None
            return None
        mesh = init_device_mesh(device_type, shape, mesh_dim_names=names)
        for flat, members in self._FLATTENED:
            dims = getattr(self, members)
            if dims:
                # torch wants the flattened meshes kept by their user rather than sliced from the root
                self._flattened[flat] = mesh[dims]._flatten(flat)
        self.device_mesh = mesh
        return mesh

    def has_dimension(self, name: str) -> bool:
        """Whether the built mesh has ``name`` (a dimension larger than 1, or a flattened one
        over such dimensions)."""
        return name in getattr(self, "_flattened", {}) or (self.device_mesh is not None
                                                           and name in (self.device_mesh.mesh_dim_names or ()))

    def submesh(self, name: str) -> Any:
        """One dimension of the built mesh, flattened ones (``dp``, ``dp_shard_cp``, ``dp_cp``) included."""
        flattened = getattr(self, "_flattened", {})
        if name in flattened:
            return flattened[name]
        if not self.has_dimension(name):
            raise ConfigError(f"the device mesh has no {name!r} dimension, since its size is 1 (the mesh holds "
                              f"{list(self.active_mesh_dims) + list(flattened)})")
        return self.device_mesh[name]

    def get_device_mesh(self, device_type: str | None = None) -> Any:
        if self.device_mesh is None:
            if device_type is None:
                raise ConfigError("the device mesh is not built yet: pass device_type, or create the Accelerator first")
            return self.build_device_mesh(device_type)
        return self.device_mesh

    def to_json(self) -> dict[str, Any]:
        return {"dp_replicate_size": self.dp_replicate_size, "dp_shard_size": self.dp_shard_size,
                "tp_size": self.tp_size, "cp_size": self.cp_size,
                "cp_comm_strategy": self.cp_handler.cp_comm_strategy if self.cp_handler else None,
                "enable_async_tp": bool(self.tp_handler and self.tp_handler.enable_async_tp)}

    def environment(self) -> dict[str, str]:
        """The variables that describe this layout to launched processes."""
        env = {ENV[name]: str(getattr(self, name)) for name in ("dp_replicate_size", "dp_shard_size", "tp_size",
                                                                 "cp_size")}
        if self.cp_handler is not None:
            env[ENV["cp_comm_strategy"]] = self.cp_handler.cp_comm_strategy
        if self.sp_enabled:
            env[ENV["sp_size"]], env[ENV["sp_backend"]] = str(self.sp_size), self.sp_backend
        return {**env, **{environment.own_name(key): value for key, value in env.items()}}
