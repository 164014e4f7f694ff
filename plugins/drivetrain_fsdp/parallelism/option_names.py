"""The ``ParallelismConfig`` fields' variables and choices that discovery reads (the config
section), apart from the classes in :mod:`drivetrain_fsdp.parallelism.config`: loading the plugin
then creates no dataclass, which costs milliseconds in every process."""

from __future__ import annotations

CP_COMM_STRATEGIES = ("allgather", "alltoall")
#: Variables Accelerate's launcher sets, by field.
ENV = {
    "dp_replicate_size": "PARALLELISM_CONFIG_DP_REPLICATE_SIZE",
    "dp_shard_size": "PARALLELISM_CONFIG_DP_SHARD_SIZE",
    "tp_size": "PARALLELISM_CONFIG_TP_SIZE",
    "cp_size": "PARALLELISM_CONFIG_CP_SIZE",
    "cp_comm_strategy": "PARALLELISM_CONFIG_CP_COMM_STRATEGY",
    "sp_size": "PARALLELISM_CONFIG_SP_SIZE",
    "sp_backend": "PARALLELISM_CONFIG_SP_BACKEND",
    # read by the sequence-parallel backend's handler (DeepSpeedSequenceParallelConfig)
    "sp_seq_length": "PARALLELISM_CONFIG_SP_SEQ_LENGTH",
    "sp_seq_length_is_variable": "PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE",
    "sp_attn_implementation": "PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION",
}
#: Fields the layout passes through to the sequence-parallel backend's handler.
SP_HANDLER_FIELDS = ("sp_seq_length", "sp_seq_length_is_variable", "sp_attn_implementation")
#: Who runs sequence parallelism (``sp_size > 1``): DeepSpeed's Ulysses, under the deepspeed strategy.
SP_BACKENDS = ("deepspeed",)
