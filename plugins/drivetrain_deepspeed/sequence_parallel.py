"""Ulysses sequence parallelism (DeepSpeed's ALST) under the deepspeed strategy.

``ParallelismConfig(sp_size=N, sp_backend="deepspeed", sp_handler=DeepSpeedSequenceParallelConfig(...))``
beside ``deepspeed_plugin=`` or under the deepspeed strategy the launcher chose (or
``PARALLELISM_CONFIG_SP_*`` variables, which ``drivetrain launch`` sets from the
``parallelism_config:`` block) splits each sequence over ``N`` processes. Every process still reads its own batches; DeepSpeed's
``UlyssesSPDataLoaderAdapter`` gathers the batches of the ``N`` processes of a group and hands
each process its slice of one of them in turn, and the model's attention is swapped for
``UlyssesSPAttentionHF``, which exchanges sequence slices for head slices (an all-to-all) around
the model's own attention: with ``sdpa`` under a name of its own set on the prepared model
(other models of the process keep plain sdpa); flash and flex attention are swapped for the
whole process, as DeepSpeed does. The engine sums gradients over a sequence-parallel group and
averages them over the data-parallel replicas (DeepSpeed's ``mpu``): for one process's gradients,
each process's loss must be its share of the group's loss, its token-loss sum divided by the
group's token count (Accelerate's all-gathered average gives ``sp_size`` times them). The
run's ``DeviceMesh`` (``accelerator.torch_device_mesh``) has an ``sp`` dimension whose group
holds the ranks of DeepSpeed's sequence-parallel group.

Importing this module is cheap: torch and DeepSpeed are imported by the functions that use them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from drivetrain.plugin_api import ConfigError, contributed, environment

#: Variables the launcher sets from the ``parallelism_config:`` block, by field.
ENV = {
    "sp_seq_length": "PARALLELISM_CONFIG_SP_SEQ_LENGTH",
    "sp_seq_length_is_variable": "PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE",
    "sp_attn_implementation": "PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION",
}
#: The earliest DeepSpeed with the Ulysses pieces used here (``UlyssesSPAttentionHF``,
#: ``UlyssesSPDataLoaderAdapter``); Accelerate's name, contributed as ``utils.constants.<name>``.
BETA_SP_AVAILABLE_DEEPSPEED_VERSION = "0.18.2"
#: eager attention builds a full 4-D mask from the local slice; Ulysses needs position ids instead.
UNSUPPORTED_ATTENTION = ("eager", "paged|eager")


def _read(field_name: str, env: Mapping[str, str] | None) -> str | None:
    variable = ENV[field_name]
    value = environment.read_pair(environment.own_name(variable), variable, env=env,
                                  meaning=lambda text: text.strip())
    return value.strip() if value and value.strip() else None


@dataclass
class DeepSpeedSequenceParallelConfig:
    """Options of DeepSpeed's Ulysses sequence parallelism (``ParallelismConfig.sp_handler``).

    Attributes:
        sp_seq_length: the sequence length of every batch, when it is fixed
            (``sp_seq_length_is_variable=False``); a multiple of ``sp_size``.
        sp_seq_length_is_variable: whether the sequence length may change between batches
            (the default); the lengths are then read from each batch.
        sp_attn_implementation: the transformers attention Ulysses wraps: ``"sdpa"`` (the
            default), ``"flash_attention_2"``, ``"flash_attention_3"``, ``"flex_attention"``.
            The model must be loaded with the same one. ``"eager"`` cannot work: it needs a
            full attention mask, where Ulysses passes position ids.
    """

    sp_seq_length: int | None = None
    sp_seq_length_is_variable: bool | None = None
    sp_attn_implementation: str | None = None

    def __post_init__(self) -> None:
        self._apply_environment(None)

    def _apply_environment(self, env: Mapping[str, str] | None) -> None:
        if self.sp_seq_length is None:
            self.sp_seq_length = _read("sp_seq_length", env)
        if self.sp_seq_length is not None:
            try:
                self.sp_seq_length = int(self.sp_seq_length)
            except (TypeError, ValueError):
                raise ConfigError(f"sp_seq_length must be a whole number of tokens, not {self.sp_seq_length!r}") from None
            if self.sp_seq_length < 1:
                raise ConfigError(f"sp_seq_length must be at least 1, got {self.sp_seq_length}")
        if self.sp_seq_length_is_variable is None:
            text = _read("sp_seq_length_is_variable", env)
            self.sp_seq_length_is_variable = (True if text is None else
                                              environment.parse_bool(text, ENV["sp_seq_length_is_variable"]))
        self.sp_seq_length_is_variable = bool(self.sp_seq_length_is_variable)
        if self.sp_attn_implementation is None:
            self.sp_attn_implementation = _read("sp_attn_implementation", env) or "sdpa"
        if self.sp_attn_implementation in UNSUPPORTED_ATTENTION:
            raise ConfigError(f"sp_attn_implementation={self.sp_attn_implementation!r} cannot run Ulysses sequence "
                              "parallelism (it needs a full 4-D attention mask); use 'sdpa' or a flash attention")
        if not self.sp_seq_length_is_variable and self.sp_seq_length is None:
            raise ConfigError("sp_seq_length_is_variable=False needs sp_seq_length (the fixed sequence length)")

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> "DeepSpeedSequenceParallelConfig":
        config = cls.__new__(cls)
        config.sp_seq_length = config.sp_seq_length_is_variable = config.sp_attn_implementation = None
        config._apply_environment(env)
        return config


@dataclass
class SequenceParallelLayout:
    """What one run's sequence parallelism is: its degree, options and data-parallel sizes."""

    sp_size: int
    handler: DeepSpeedSequenceParallelConfig
    dp_replicate_size: int = 1
    dp_shard_size: int = 1
    config: Any = None  # the ParallelismConfig it was read from


def layout_of(run: Any) -> SequenceParallelLayout | None:
    """The run's sequence-parallel layout, or ``None`` when sequences are not split.

    From the ``parallelism_config=`` the Accelerator was given, else from the variables.
    """
    config = run.strategy.arguments.get("parallelism_config")
    if config is None:
        size = environment.read_pair(environment.own_name("PARALLELISM_CONFIG_SP_SIZE"), "PARALLELISM_CONFIG_SP_SIZE")
        if not size or int(size) <= 1:
            return None
        # ParallelismConfig is the parallelism plugin's: reached through the name it contributes.
        parallelism_config = contributed("ParallelismConfig", None)
        if parallelism_config is None:
            raise ConfigError("PARALLELISM_CONFIG_SP_SIZE is set but no plugin offers ParallelismConfig; "
                              "unblock the parallelism plugin (DRIVETRAIN_BLOCK_PLUGINS)")
        config = parallelism_config.from_environment(os.environ)
    sp_size = int(getattr(config, "sp_size", 1) or 1)
    if sp_size <= 1:
        others = [f"{name}={getattr(config, name)}" for name in ("tp_size", "cp_size")
                  if int(getattr(config, name, 1) or 1) > 1]
        if others:
            raise ConfigError(f"the deepspeed strategy runs sequence parallelism (sp_size) only, not {', '.join(others)}; "
                              "use the parallelism_config strategy (without deepspeed_plugin= or a DeepSpeed launch) "
                              "for TP and CP")
        return None
    backend = getattr(config, "sp_backend", "deepspeed")
    if backend != "deepspeed":
        raise ConfigError(f"sp_backend={backend!r} does not run under the deepspeed strategy; set sp_backend='deepspeed'")
    world = run.state.num_processes
    if world % sp_size:
        raise ConfigError(f"sp_size={sp_size} does not divide the {world} processes of the run; choose a divisor")
    handler = getattr(config, "sp_handler", None)
    if handler is None:
        handler = DeepSpeedSequenceParallelConfig()
    if not isinstance(handler, DeepSpeedSequenceParallelConfig):
        raise ConfigError(f"sp_handler must be a DeepSpeedSequenceParallelConfig, not {type(handler).__name__}")
    if handler.sp_seq_length is not None and handler.sp_seq_length % sp_size:
        raise ConfigError(f"sp_seq_length={handler.sp_seq_length} is not a multiple of sp_size={sp_size}")
    replicate = int(getattr(config, "dp_replicate_size", 1) or 1)
    shard = int(getattr(config, "dp_shard_size", 1) or 1)
    if replicate * shard * sp_size != world:
        if (replicate, shard) != (1, 1):
            raise ConfigError(f"dp_replicate_size={replicate} × dp_shard_size={shard} × sp_size={sp_size} is not the "
                              f"{world} processes of the run; change the sizes (or leave the dp sizes at 1)")
        shard = world // sp_size  # data-parallel sizes left out: the other processes are data-parallel
    return SequenceParallelLayout(sp_size=sp_size, handler=handler, dp_replicate_size=replicate, dp_shard_size=shard,
                                  config=config)


#: Dimensions of the run's ``DeviceMesh``, outermost first (Accelerate's names). The ``sp``
#: dimension is innermost, so a rank's ``sp`` peers are its neighbours, ranks ``i*sp_size`` to
#: ``(i+1)*sp_size - 1``: the sequence-parallel groups DeepSpeed builds.
MESH_DIMENSIONS = ("dp_replicate", "dp_shard", "sp")


@dataclass
class SequenceParallelMesh:
    """The run's ``DeviceMesh`` (``accelerator.torch_device_mesh``) and the layout it was built for."""

    layout: SequenceParallelLayout
    mesh: Any
    dp: Any  # the flattened ``dp`` dimension (dp_replicate × dp_shard), kept alive beside the mesh


def build_device_mesh(layout: SequenceParallelLayout, device_type: str) -> SequenceParallelMesh:
    """The mesh of ``dp_replicate × dp_shard × sp`` processes, with the flattened ``dp``.

    Its groups are torch's own, apart from DeepSpeed's, but ``mesh["sp"].get_group()`` holds
    the same ranks as DeepSpeed's sequence-parallel group. Every process must call this (it
    makes process groups); the strategy builds it when the Accelerator is created.
    """
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device_type, (layout.dp_replicate_size, layout.dp_shard_size, layout.sp_size),
                            mesh_dim_names=MESH_DIMENSIONS)
    flattened = mesh["dp_replicate", "dp_shard"]._flatten("dp")
    if layout.config is not None and hasattr(layout.config, "device_mesh"):
        layout.config.device_mesh = mesh  # as Accelerate's ParallelismConfig keeps it
    return SequenceParallelMesh(layout=layout, mesh=mesh, dp=flattened)


def register_attention(model: Any, layout: SequenceParallelLayout, micro_batch_size: int) -> Any:
    """Swap the model's attention for Ulysses and build DeepSpeed's sequence-parallel groups;
    returns DeepSpeed's ``mpu`` (handed to ``deepspeed.initialize``)."""
    import deepspeed.runtime.sequence_parallel.parallel_state_sp as mpu
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

    if not hasattr(model, "config") or not hasattr(model.config, "get_text_config"):
        raise ConfigError(f"Ulysses sequence parallelism swaps a transformers model's attention; "
                          f"{type(model).__name__} is not one")
    text_config = model.config.get_text_config()
    for name in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(text_config, name, None)
        if heads is not None and heads % layout.sp_size and not (name == "num_key_value_heads"
                                                                 and layout.sp_size % heads == 0):
            raise ConfigError(f"the model's {name}={heads} cannot be split over sp_size={layout.sp_size}; "
                              "choose an sp_size that divides it")
    if getattr(mpu, "_SEQUENCE_PARALLEL_GROUP", None) is not None:
        # a later Accelerator of the same process: the groups and the attention swap stay
        if mpu.get_sequence_parallel_world_size() != layout.sp_size:
            raise ConfigError("sequence parallelism was set up with another sp_size in this process; "
                              "one process runs one sp_size")
        _use_scoped_attention(model, layout.handler.sp_attn_implementation)
        return mpu
    import deepspeed.comm
    import torch.distributed

    if not deepspeed.comm.is_initialized():
        # DeepSpeed's groups are made through its own comm layer, over the run's process group
        deepspeed.comm.init_distributed(dist_backend=torch.distributed.get_backend(), auto_mpi_discovery=False)
    handler = layout.handler
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    core = handler.sp_attn_implementation
    original = ALL_ATTENTION_FUNCTIONS[core] if core in ALL_ATTENTION_FUNCTIONS else None
    try:
        groups = UlyssesSPAttentionHF.register_with_transformers(
            model_name_or_path=model, core_attn_implementation=core,
            sequence_parallel_size=layout.sp_size, micro_batch_size=micro_batch_size,
            seq_length=handler.sp_seq_length, seq_length_is_variable=handler.sp_seq_length_is_variable)
    except ValueError as exc:
        raise ConfigError(f"Ulysses sequence parallelism: {' '.join(str(exc).split())}") from exc
    if core in SCOPED_ATTENTION and original is not None:
        # DeepSpeed put its wrapper in place of the core attention for every model of the process;
        # give the core its own function back and the wrapper a name of its own, used by this model
        ALL_ATTENTION_FUNCTIONS[SCOPED_ATTENTION[core]] = ALL_ATTENTION_FUNCTIONS[core]
        ALL_ATTENTION_FUNCTIONS[core] = original
        _use_scoped_attention(model, core)
    return groups


#: Core attentions whose Ulysses wrapper gets a name of its own, set on the prepared model only.
#: transformers consults sdpa's name only to find the function and its mask (a name without a
#: mask function gets none, which Ulysses discards anyway); flash and flex attention are also
#: recognised by name elsewhere in transformers, so DeepSpeed's process-wide swap stays for them.
SCOPED_ATTENTION = {"sdpa": "drivetrain_ulysses_sdpa"}


def _use_scoped_attention(model: Any, core: str) -> None:
    name = SCOPED_ATTENTION.get(core)
    if name is None:
        return
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if name in ALL_ATTENTION_FUNCTIONS:  # else this process kept DeepSpeed's process-wide swap
        model.set_attn_implementation(name)


def wrap_data_loader(loader: Any, layout: SequenceParallelLayout, device: Any) -> Any:
    """DeepSpeed's adapter over a prepared loader: each batch of the group, split by sequence."""
    import deepspeed.runtime.sequence_parallel.parallel_state_sp as mpu
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPDataLoaderAdapter

    if getattr(mpu, "_SEQUENCE_PARALLEL_GROUP", None) is None:
        raise ConfigError("with sequence parallelism, prepare the model (in the same or an earlier prepare() call) "
                          "before its data loaders")
    return UlyssesSPDataLoaderAdapter(loader, sp_rank=mpu.get_sequence_parallel_rank(),
                                      sp_group=mpu.get_sequence_parallel_group(),
                                      sp_world_size=mpu.get_sequence_parallel_world_size(), device=device)


def sequence_parallel_group() -> Any:
    """The process group of this process's sequence-parallel peers (for the loss across them)."""
    import deepspeed.runtime.sequence_parallel.parallel_state_sp as mpu

    return mpu.get_sequence_parallel_group()
