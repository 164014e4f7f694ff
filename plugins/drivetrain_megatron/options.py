"""The user's Megatron-LM options: ``MegatronLMPlugin``, with Accelerate's names.

Values come, strongest first, from the object's arguments, from ``MEGATRON_LM_*`` variables
(or drivetrain's ``DRIVETRAIN_MEGATRON_LM_*``; ``drivetrain launch`` sets both from the
``megatron_lm_config:`` block and its ``--megatron-lm-*`` options), then defaults. This module
does not import torch or Megatron: the launcher checks the options with it.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from typing import Any, Callable, Mapping

from drivetrain.plugin_api import ConfigError, environment

from .option_names import ENV

_KINDS: dict[str, type] = {"tp_degree": int, "pp_degree": int, "num_micro_batches": int, "gradient_clipping": float,
                           "sequence_parallelism": bool, "recompute_activations": bool,
                           "use_distributed_optimizer": bool}
_DEFAULTS: dict[str, Any] = {"tp_degree": 1, "pp_degree": 1, "num_micro_batches": 1, "gradient_clipping": 1.0,
                             "sequence_parallelism": False, "recompute_activations": False,
                             "use_distributed_optimizer": False}


def _parse(name: str, value: Any, where: str) -> Any:
    kind = _KINDS[name]
    if kind is bool:
        if isinstance(value, bool):
            return value
        return environment.parse_bool(str(value), where)
    if isinstance(value, bool):
        raise ConfigError(f"{where} must be a number, not {value!r}")
    try:
        parsed = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where} is {value!r}, which is not a {'whole ' if kind is int else ''}number") from None
    if kind is int and parsed < 1:
        raise ConfigError(f"{where} must be at least 1, got {parsed}")
    if kind is float and parsed < 0:
        raise ConfigError(f"{where} must be 0 (off) or more, got {parsed}")
    return parsed


@dataclass
class MegatronLMPlugin:
    """Options of Megatron-LM training: parallel degrees, sequence parallelism, activation
    recomputation, the distributed optimizer, the learning-rate schedule and the train step.

    ``tp_degree × pp_degree`` must divide the number of processes; the quotient is the
    data-parallel degree.
    """

    tp_degree: int | None = None
    pp_degree: int | None = None
    num_micro_batches: int | None = None
    gradient_clipping: float | None = None
    sequence_parallelism: bool | None = None
    recompute_activations: bool | None = None
    use_distributed_optimizer: bool | None = None
    pipeline_model_parallel_split_rank: int | None = None
    num_layers_per_virtual_pipeline_stage: int | None = None
    is_train_batch_min: bool = True
    train_iters: int | None = None
    train_samples: int | None = None
    weight_decay_incr_style: str = "constant"
    start_weight_decay: float | None = None
    end_weight_decay: float | None = None
    lr_decay_style: str = "linear"
    lr_decay_iters: int | None = None
    lr_decay_samples: int | None = None
    lr_warmup_iters: int | None = None
    lr_warmup_samples: int | None = None
    lr_warmup_fraction: float | None = None
    min_lr: float = 0.0
    consumed_samples: list[int] | None = None
    no_wd_decay_cond: Callable | None = None
    scale_lr_cond: Callable | None = None
    lr_mult: float = 1.0
    megatron_dataset_flag: bool = False
    seq_length: int | None = None
    encoder_seq_length: int | None = None
    decoder_seq_length: int | None = None
    tensorboard_dir: str | None = None
    set_all_logging_options: bool = False
    eval_iters: int = 100
    eval_interval: int = 1000
    return_logits: bool = False
    custom_train_step_class: Any = None
    custom_train_step_kwargs: dict[str, Any] | None = None
    custom_model_provider_function: Callable | None = None
    custom_prepare_model_function: Callable | None = None
    custom_megatron_datasets_provider_function: Callable | None = None
    custom_get_batch_function: Callable | None = None
    custom_loss_function: Callable | None = None
    other_megatron_args: dict[str, Any] | None = None
    megatron_lm_default_args: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._resolve(None)

    def _resolve(self, env: Mapping[str, str] | None) -> None:
        for name, variable in ENV.items():
            value = getattr(self, name)
            where = name
            if value is None:
                text = environment.read_pair(environment.own_name(variable), variable, env=env,
                                             meaning=lambda v: v.strip().lower())
                value, where = (text, variable) if text not in (None, "") else (_DEFAULTS[name], name)
            setattr(self, name, _parse(name, value, where))
        if self.sequence_parallelism and self.tp_degree == 1:
            raise ConfigError("sequence_parallelism splits activations over the tensor-parallel processes and needs "
                              "tp_degree > 1; raise tp_degree or turn sequence_parallelism off")
        if self.pp_degree == 1 and self.num_layers_per_virtual_pipeline_stage is not None:
            raise ConfigError("num_layers_per_virtual_pipeline_stage interleaves pipeline stages and needs "
                              "pp_degree > 1")
        if self.lr_decay_style not in ("constant", "linear", "cosine", "inverse-square-root", "WSD"):
            raise ConfigError(f"lr_decay_style {self.lr_decay_style!r} is not one of constant, linear, cosine, "
                              "inverse-square-root, WSD")
        if self.weight_decay_incr_style not in ("constant", "linear", "cosine"):
            raise ConfigError(f"weight_decay_incr_style {self.weight_decay_incr_style!r} is not one of constant, "
                              "linear, cosine")
        self.megatron_lm_default_args = {
            "tensor_model_parallel_size": self.tp_degree, "pipeline_model_parallel_size": self.pp_degree,
            "sequence_parallel": self.sequence_parallelism, "clip_grad": self.gradient_clipping,
            "num_micro_batches": self.num_micro_batches,
            "recompute_granularity": "selective" if self.recompute_activations else None,
            "use_distributed_optimizer": self.use_distributed_optimizer,
            **(self.other_megatron_args or {}),
        }

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> "MegatronLMPlugin":
        plugin = cls.__new__(cls)
        for item in cls.__dataclass_fields__.values():
            default = item.default_factory() if item.default_factory is not MISSING else item.default
            setattr(plugin, item.name, default)
        plugin._resolve(env)
        return plugin

    def data_parallel_degree(self, num_processes: int) -> int:
        """Processes per model replica are ``tp × pp``; the rest replicate."""
        model = self.tp_degree * self.pp_degree
        if num_processes % model:
            raise ConfigError(f"tp_degree={self.tp_degree} × pp_degree={self.pp_degree} = {model} does not divide the "
                              f"{num_processes} processes; choose degrees whose product divides it")
        return num_processes // model

    def environment(self) -> dict[str, str]:
        env = {}
        for name, variable in ENV.items():
            value = getattr(self, name)
            env[variable] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return {**env, **{environment.own_name(key): value for key, value in env.items()}}
