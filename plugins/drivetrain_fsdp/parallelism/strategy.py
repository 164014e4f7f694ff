"""The ``parallelism_config`` strategy: one object per run that holds the layout, its device
mesh and the FSDP state of the data-parallel dimensions, offers Accelerate's ND-parallel
attributes, clips over the mesh and implements the run hooks (``run.strategy``, ``StrategySpec(hooks=...)``).

It is FSDP2 composed with tensor and context parallelism, so it *is* an FSDP strategy: the
fsdp plugin's hooks for optimizers, accumulation and checkpoints (DCP) serve its models as
they are, and only configuration, wrapping and clipping are its own. Cheap to import (no torch).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from drivetrain.plugin_api import ConfigError, DrivetrainError, hookimpl

from ..strategy import FSDPStrategy
from .config import ParallelismConfig, TorchTensorParallelPlugin

NAME = "parallelism_config"
ARGUMENTS = ("parallelism_config", "torch_tp_plugin")


def _config_from_arguments(run: Any, arguments: dict[str, Any]) -> ParallelismConfig:
    config = arguments.get("parallelism_config")
    tp_plugin = arguments.get("torch_tp_plugin")
    if config is not None and tp_plugin is not None:
        raise ConfigError("pass parallelism_config or torch_tp_plugin, not both (ParallelismConfig(tp_size=...) "
                          "covers tensor parallelism)")
    if tp_plugin is not None:
        if not isinstance(tp_plugin, TorchTensorParallelPlugin):
            raise ConfigError(f"torch_tp_plugin must be a TorchTensorParallelPlugin, not {type(tp_plugin).__name__}")
        world = run.state.num_processes
        if world % tp_plugin.tp_size:
            raise ConfigError(f"tp_size={tp_plugin.tp_size} does not divide the {world} processes of the run; "
                              "choose a divisor")
        return ParallelismConfig(tp_size=tp_plugin.tp_size, dp_replicate_size=world // tp_plugin.tp_size,
                                 dp_shard_size=1, cp_size=1)
    if config is None:
        import os

        return ParallelismConfig.from_environment(os.environ)
    if not isinstance(config, ParallelismConfig):
        raise ConfigError(f"parallelism_config must be a ParallelismConfig, not {type(config).__name__}")
    return config


class ParallelismStrategy(FSDPStrategy):
    """ND parallelism as the run's strategy.

    Attributes (besides :class:`FSDPStrategy`'s, which shard the data-parallel dimensions):
        config: the resolved :class:`ParallelismConfig` (``None`` until configured).
        mesh: its ``DeviceMesh``: the dimensions of ``dp_replicate, dp_shard, cp, tp`` larger
            than 1, with the flattened ``dp``, ``dp_shard_cp``, ``dp_cp`` over the enabled ones
            (``None`` when every size is 1), as Accelerate builds it.
    """

    exposes = ("parallelism_config", "torch_device_mesh", "device_mesh", "is_composable_parallelism_enabled",
               "data_parallel_rank", "data_parallel_shard_rank", "tensor_parallel_rank", "context_parallel_rank",
               "pipeline_parallel_rank", "maybe_context_parallel")

    def __init__(self, run: Any, arguments: Any = None) -> None:
        super().__init__(run, arguments)
        self.config: ParallelismConfig | None = None
        self.mesh: Any = None

    def rank_in(self, dimension: str) -> int:
        return self.mesh.get_local_rank(dimension) if self.config.size_of(dimension) > 1 else 0

    # ------------------------------------------------------------ Accelerate's attributes

    def _configured(self, name: str) -> ParallelismConfig:
        if self.config is None:
            raise AttributeError(name)
        return self.config

    @property
    def parallelism_config(self) -> ParallelismConfig:
        return self._configured("parallelism_config")

    @property
    def torch_device_mesh(self) -> Any:
        self._configured("torch_device_mesh")
        return self.mesh

    @property
    def device_mesh(self) -> Any:
        self._configured("device_mesh")
        return self.mesh

    @property
    def is_composable_parallelism_enabled(self) -> bool:
        return self._configured("is_composable_parallelism_enabled") is not None

    @property
    def data_parallel_rank(self) -> int:
        config = self._configured("data_parallel_rank")
        return config.submesh("dp").get_local_rank() if config.has_dimension("dp") else 0

    @property
    def data_parallel_shard_rank(self) -> int:
        self._configured("data_parallel_shard_rank")
        return self.rank_in("dp_shard")

    @property
    def tensor_parallel_rank(self) -> int:
        self._configured("tensor_parallel_rank")
        return self.rank_in("tp")

    @property
    def context_parallel_rank(self) -> int:
        self._configured("context_parallel_rank")
        return self.rank_in("cp")

    @property
    def pipeline_parallel_rank(self) -> int:
        self._configured("pipeline_parallel_rank")
        return 0  # no pipeline dimension in this layout

    def maybe_context_parallel(self, buffers: list[Any] | None = None, buffer_seq_dims: list[int] | None = None,
                               no_restore_buffers: set[Any] | None = None) -> contextlib.AbstractContextManager:
        self._configured("maybe_context_parallel")
        return context_parallel(self, buffers, buffer_seq_dims, no_restore_buffers)

    # ------------------------------------------------------------ configuration

    def configure(self, run: Any) -> None:
        """Resolve the layout, check it against the run, build the mesh (once per ``Accelerator``)."""
        config = _config_from_arguments(run, self.arguments)
        world = run.state.num_processes
        config.validate(world)
        device_type = run.platform.device_type
        check_platform(config, device_type)
        from ..wrap import ensure_process_group

        if self.arguments.get("fsdp_plugin") is None:
            from drivetrain.plugin_api import environment

            from ..options import ENV as FSDP_ENV
            from ..options import FullyShardedDataParallelPlugin

            variable = FSDP_ENV["fsdp_version"]
            chosen = environment.read_pair(environment.own_name(variable), variable)
            # FSDP options come from the environment (fsdp_config:, FSDP_* variables); the version
            # defaults to 2 here, since only FSDP2 composes with the other dimensions.
            self.arguments["fsdp_plugin"] = FullyShardedDataParallelPlugin(**({} if chosen else {"fsdp_version": 2}))
        super().configure(run)
        if self.options.fsdp_version != 2:
            raise ConfigError("ParallelismConfig shards with FSDP2; set fsdp_version to 2 (FSDP_VERSION=2)")
        ensure_process_group(run)
        mesh = config.device_mesh
        if mesh is None:
            if self.config is not None and self.config.to_json() == config.to_json():
                # a new Accelerator with the same layout
                mesh = config.device_mesh = self.mesh
                config._flattened = getattr(self.config, "_flattened", {})
            else:
                mesh = config.build_device_mesh(device_type)
        self.config, self.mesh = config, mesh
        run.data_parallel = (self.data_parallel_rank, config.data_parallel_size)

    def configure_unprepared(self, run: Any) -> None:
        raise DrivetrainError("the parallelism_config strategy is not configured for this run; create the "
                              "Accelerator before preparing models")

    # ------------------------------------------------------------ its own run hooks

    @hookimpl
    def drivetrain_configure_run(self, run):
        self.configure(run)
        return self

    @hookimpl
    def drivetrain_wrap_model(self, model, run, evaluation_mode):
        from .wrap import wrap_model

        return wrap_model(model, run)

    def clip_grad_norm(self, parameters: Any, max_norm: float, norm_type: float) -> Any:
        from .wrap import clip_grad_norm

        return clip_grad_norm(parameters, max_norm, norm_type)

    def clip_grad_value(self, parameters: Any, clip_value: float) -> bool:
        raise DrivetrainError("gradients split over a device mesh cannot be clipped by value; use "
                              "accelerator.clip_grad_norm_ instead")


@contextlib.contextmanager
def context_parallel(strategy: ParallelismStrategy, buffers: list[Any] | None, buffer_seq_dims: list[int] | None,
                     no_restore_buffers: set[Any] | None) -> Iterator[None]:
    """Split ``buffers`` along their sequence dimension over the ``cp`` processes and run
    scaled-dot-product attention as ring attention inside (torch's ``context_parallel``)."""
    config = strategy.config
    if not config.cp_enabled:
        yield
        return
    from torch.distributed.tensor.experimental import context_parallel as torch_context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method

    set_rotate_method(config.cp_handler.cp_comm_strategy)
    with torch_context_parallel(strategy.mesh["cp"], buffers=buffers, buffer_seq_dims=buffer_seq_dims,
                                no_restore_buffers=no_restore_buffers):
        yield


def check_platform(config: ParallelismConfig, device_type: str) -> None:
    """Refuse what torch cannot do on this platform, before any model is touched."""
    if config.sp_enabled:
        raise ConfigError(f"sequence parallelism (sp_size={config.sp_size}) is DeepSpeed's Ulysses and runs under the "
                          "deepspeed strategy: pass deepspeed_plugin=DeepSpeedPlugin(...) beside parallelism_config= "
                          "(or launch with --use-deepspeed)")
    if config.cp_enabled and device_type == "cpu":
        raise ConfigError(
            "context parallelism (cp_size > 1) runs attention as ring attention through torch's context_parallel, "
            "whose attention kernels exist for CUDA only (the CPU's flash-attention operator has no sharding rule); "
            "set cp_size to 1 on the CPU, or run on GPUs")
    if config.dp_replicate_enabled and not config.fsdp_enabled:
        import torch
        from torch.distributed.device_mesh import DeviceMesh

        if not hasattr(DeviceMesh, "_unflatten"):  # the FSDP2 mesh of replicas alone is built with it
            raise ConfigError(f"dp_replicate_size={config.dp_replicate_size} with dp_shard_size=1 and cp_size=1 needs "
                              f"torch 2.9 or later (DeviceMesh._unflatten; this is {torch.__version__}); upgrade torch, "
                              "or shard the model instead (dp_shard_size)")
    if config.tp_handler is not None and config.tp_handler.enable_async_tp and device_type == "cpu":
        raise ConfigError("enable_async_tp overlaps TP collectives with symmetric-memory kernels that need GPUs; "
                          "turn it off on the CPU")
