"""What the ``parallelism_config`` strategy keeps for one run: the layout, its device mesh,
and the ranks it exposes on ``AcceleratorState`` and the ``Accelerator``."""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Iterator

from drivetrain.plugin_api import ConfigError, DrivetrainError

from .config import ParallelismConfig, TorchTensorParallelPlugin

NAME = "parallelism_config"
ARGUMENTS = ("parallelism_config", "torch_tp_plugin")


def _config_from_options(run: Any) -> ParallelismConfig:
    config = run.options.get("parallelism_config")
    tp_plugin = run.options.get("torch_tp_plugin")
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


class Runtime:
    """The strategy's state for one run.

    Attributes:
        config: the resolved :class:`ParallelismConfig`.
        mesh: its ``DeviceMesh`` (dimensions ``dp_replicate, dp_shard, cp, tp`` and the
            flattened ``dp``, ``dp_shard_cp``, ``dp_cp``).
        fsdp: the fsdp plugin's runtime for this run: its options shard the data-parallel
            dimensions, and its checkpoint code reads and writes the models.
    """

    def __init__(self, run: Any, config: ParallelismConfig, mesh: Any, fsdp: Any) -> None:
        self._run = weakref.ref(run)
        self.config = config
        self.mesh = mesh
        self.fsdp = fsdp
        self.extension = Extension(self)

    def rank_in(self, dimension: str) -> int:
        return self.mesh.get_local_rank(dimension) if self.config.size_of(dimension) > 1 else 0

    @property
    def data_parallel_rank(self) -> int:
        return self.config.submesh("dp").get_local_rank()

    def active(self) -> bool:
        from ..runtime import strategy_chosen

        return strategy_chosen(self._run(), NAME)


class Extension:
    """Accelerate's attributes of an ND-parallel run, on ``AcceleratorState`` and the ``Accelerator``."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = weakref.ref(runtime)

    def _live(self, name: str) -> Runtime:
        runtime = self._runtime()
        if runtime is None or not runtime.active():
            raise AttributeError(name)
        return runtime

    @property
    def parallelism_config(self) -> ParallelismConfig:
        return self._live("parallelism_config").config

    @property
    def torch_device_mesh(self) -> Any:
        return self._live("torch_device_mesh").mesh

    @property
    def device_mesh(self) -> Any:
        return self._live("device_mesh").mesh

    @property
    def is_composable_parallelism_enabled(self) -> bool:
        return self._live("is_composable_parallelism_enabled") is not None

    @property
    def data_parallel_rank(self) -> int:
        return self._live("data_parallel_rank").data_parallel_rank

    @property
    def data_parallel_shard_rank(self) -> int:
        return self._live("data_parallel_shard_rank").rank_in("dp_shard")

    @property
    def tensor_parallel_rank(self) -> int:
        return self._live("tensor_parallel_rank").rank_in("tp")

    @property
    def context_parallel_rank(self) -> int:
        return self._live("context_parallel_rank").rank_in("cp")

    @property
    def pipeline_parallel_rank(self) -> int:
        self._live("pipeline_parallel_rank")
        return 0  # no pipeline dimension in this layout

    def maybe_context_parallel(self, buffers: list[Any] | None = None, buffer_seq_dims: list[int] | None = None,
                               no_restore_buffers: set[Any] | None = None) -> contextlib.AbstractContextManager:
        return context_parallel(self._live("maybe_context_parallel"), buffers, buffer_seq_dims, no_restore_buffers)


@contextlib.contextmanager
def context_parallel(runtime: Runtime, buffers: list[Any] | None, buffer_seq_dims: list[int] | None,
                     no_restore_buffers: set[Any] | None) -> Iterator[None]:
    """Split ``buffers`` along their sequence dimension over the ``cp`` processes and run
    scaled-dot-product attention as ring attention inside (torch's ``context_parallel``)."""
    config = runtime.config
    if not config.cp_enabled:
        yield
        return
    from torch.distributed.tensor.experimental import context_parallel as torch_context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method

    set_rotate_method(config.cp_handler.cp_comm_strategy)
    with torch_context_parallel(runtime.mesh["cp"], buffers=buffers, buffer_seq_dims=buffer_seq_dims,
                                no_restore_buffers=no_restore_buffers):
        yield


_RUNTIMES: "weakref.WeakKeyDictionary[Any, Runtime]" = weakref.WeakKeyDictionary()


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
    if config.tp_handler is not None and config.tp_handler.enable_async_tp and device_type == "cpu":
        raise ConfigError("enable_async_tp overlaps TP collectives with symmetric-memory kernels that need GPUs; "
                          "turn it off on the CPU")


def configure(run: Any) -> Runtime:
    """Resolve the layout, check it against the run, build the mesh (once per ``Accelerator``)."""
    config = _config_from_options(run)
    world = run.state.num_processes
    config.validate(world)
    device_type = run.platform.device_type
    check_platform(config, device_type)
    from ..runtime import configure as configure_fsdp
    from ..wrap import ensure_process_group

    if run.options.get("fsdp_plugin") is None:
        from drivetrain.plugin_api import environment
        from ..options import ENV as FSDP_ENV
        from ..options import FullyShardedDataParallelPlugin

        variable = FSDP_ENV["fsdp_version"]
        chosen = environment.read_pair(environment.own_name(variable), variable)
        # FSDP options come from the environment (fsdp_config:, FSDP_* variables); the version
        # defaults to 2 here, since only FSDP2 composes with the other dimensions.
        run.options["fsdp_plugin"] = FullyShardedDataParallelPlugin(**({} if chosen else {"fsdp_version": 2}))
    fsdp = configure_fsdp(run)
    if fsdp.options.fsdp_version != 2:
        raise ConfigError("ParallelismConfig shards with FSDP2; set fsdp_version to 2 (FSDP_VERSION=2)")
    ensure_process_group(run)
    previous = _RUNTIMES.get(run)
    mesh = config.device_mesh
    if mesh is None:
        if previous is not None and previous.config.to_json() == config.to_json():
            # a new Accelerator with the same layout
            mesh = config.device_mesh = previous.mesh
            config._flattened = getattr(previous.config, "_flattened", {})
        else:
            mesh = config.build_device_mesh(device_type)
    runtime = _RUNTIMES[run] = Runtime(run, config, mesh, fsdp)
    run.data_parallel = (runtime.data_parallel_rank, config.data_parallel_size)
    return runtime


def runtime_of(run: Any) -> Runtime:
    runtime = _RUNTIMES.get(run)
    if runtime is None:
        raise DrivetrainError("the parallelism_config strategy is not configured for this run; create the "
                              "Accelerator before preparing models")
    return runtime
