"""The Megatron-LM options' variables that discovery reads (the config section), apart from
``MegatronLMPlugin`` in :mod:`drivetrain_megatron.options`: loading the plugin then creates no
dataclass, which costs milliseconds in every process."""

from __future__ import annotations

#: option -> variable Accelerate's launcher sets
ENV = {
    "tp_degree": "MEGATRON_LM_TP_DEGREE",
    "pp_degree": "MEGATRON_LM_PP_DEGREE",
    "num_micro_batches": "MEGATRON_LM_NUM_MICRO_BATCHES",
    "gradient_clipping": "MEGATRON_LM_GRADIENT_CLIPPING",
    "sequence_parallelism": "MEGATRON_LM_SEQUENCE_PARALLELISM",
    "recompute_activations": "MEGATRON_LM_RECOMPUTE_ACTIVATIONS",
    "use_distributed_optimizer": "MEGATRON_LM_USE_DISTRIBUTED_OPTIMIZER",
}
