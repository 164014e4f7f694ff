"""The FSDP options' names, variables and choices that discovery reads (the config section),
apart from ``FullyShardedDataParallelPlugin`` in :mod:`drivetrain_fsdp.options`: loading the
plugin then creates no dataclass, which costs milliseconds in every process."""

from __future__ import annotations

SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
AUTO_WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
BACKWARD_PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")
STATE_DICT_TYPES = ("FULL_STATE_DICT", "SHARDED_STATE_DICT")
#: Environment variables, without the ``DRIVETRAIN_`` prefix that drivetrain's own names add.
ENV = {
    "fsdp_version": "FSDP_VERSION",
    "sharding_strategy": "FSDP_SHARDING_STRATEGY",
    "reshard_after_forward": "FSDP_RESHARD_AFTER_FORWARD",
    "backward_prefetch": "FSDP_BACKWARD_PREFETCH",
    "auto_wrap_policy": "FSDP_AUTO_WRAP_POLICY",
    "cpu_offload": "FSDP_OFFLOAD_PARAMS",
    "ignored_modules": "FSDP_IGNORED_MODULES",
    "state_dict_type": "FSDP_STATE_DICT_TYPE",
    "use_orig_params": "FSDP_USE_ORIG_PARAMS",
    "sync_module_states": "FSDP_SYNC_MODULE_STATES",
    "forward_prefetch": "FSDP_FORWARD_PREFETCH",
    "activation_checkpointing": "FSDP_ACTIVATION_CHECKPOINTING",
    "cpu_ram_efficient_loading": "FSDP_CPU_RAM_EFFICIENT_LOADING",
    "transformer_cls_names_to_wrap": "FSDP_TRANSFORMER_CLS_TO_WRAP",
    "min_num_params": "FSDP_MIN_NUM_PARAMS",
}
