"""The user's FSDP options: ``FullyShardedDataParallelPlugin``, with Accelerate's names.

Values come, strongest first, from the object's own arguments, from environment variables
(``FSDP_SHARDING_STRATEGY`` as Accelerate's launcher sets them, or drivetrain's own
``DRIVETRAIN_FSDP_SHARDING_STRATEGY``; ``drivetrain launch`` sets both from the
``fsdp_config:`` block of the config file and its ``--fsdp-*`` options), then defaults.
Every value is checked when the object is built, and combinations that cannot work are
refused with a message that names the fix.

This module does not import torch: ``drivetrain launch`` checks the options with it before
starting any process. torch objects (``ShardingStrategy``, ``MixedPrecisionPolicy``, ...) are
accepted as arguments and read by name.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable, Mapping

from drivetrain.plugin_api import ConfigError, environment

from .option_names import AUTO_WRAP_POLICIES, BACKWARD_PREFETCH, ENV, SHARDING_STRATEGIES, STATE_DICT_TYPES
from .option_values import CpuOffload, OptionName, PrecisionPolicy, StateDictSettings

logger = logging.getLogger(__name__)

#: Strategies that keep parameters gathered between forward and backward (ZeRO-2 like).
KEEPS_PARAMETERS_AFTER_FORWARD = ("SHARD_GRAD_OP", "HYBRID_SHARD_ZERO2")
HYBRID_STRATEGIES = ("HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
FSDP_VERSIONS = (1, 2)
DEFAULT_MIN_NUM_PARAMS = 100_000_000
PRECISION_DTYPES = {"fp16": "float16", "float16": "float16", "half": "float16", "bf16": "bfloat16",
                    "bfloat16": "bfloat16", "fp32": "float32", "float32": "float32", "float": "float32"}


def _read(variable: str, env: Mapping[str, str] | None) -> str | None:
    """``DRIVETRAIN_<variable>``, or Accelerate's ``<variable>``; ``None`` when neither is set."""
    value = environment.read_pair(environment.own_name(variable), variable, env=env,
                                  meaning=lambda text: text.strip().lower())
    return None if value is None or value.strip() == "" else value.strip()


def _where(name: str, from_env: bool) -> str:
    return f"{ENV[name]} (environment)" if from_env else f"FullyShardedDataParallelPlugin({name}=...)"


def _enum_name(value: Any) -> Any:
    """A torch enum member (``ShardingStrategy.FULL_SHARD``) read as its name (torch spells one
    ``_HYBRID_SHARD_ZERO2``)."""
    name = getattr(value, "name", None)
    if name is not None and not isinstance(value, (str, bool, int)):
        return name.lstrip("_")
    return value


def _to_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return environment.parse_bool(value, where)
        except ConfigError:
            pass
    raise ConfigError(f"{where} must be true or false, not {value!r}")


def _choice(value: Any, allowed: Iterable[str], where: str) -> OptionName:
    text = str(_enum_name(value)).strip().upper()
    for choice in allowed:
        if text == choice:
            return OptionName(choice)
    raise ConfigError(f"{where} is {value!r}; allowed: {', '.join(allowed)}")


def _sharding_strategy(value: Any, where: str) -> str:
    value = _enum_name(value)
    text = str(value).strip()
    if text.isdigit():  # Accelerate's older config files and launcher use 1..5
        number = int(text)
        if 1 <= number <= len(SHARDING_STRATEGIES):
            return OptionName(SHARDING_STRATEGIES[number - 1])
    return _choice(text, SHARDING_STRATEGIES, where)


def dtype_name(value: Any, where: str) -> str | None:
    """``"bfloat16"`` for ``torch.bfloat16``, ``"bf16"`` or ``"bfloat16"``; ``None`` stays ``None``."""
    if value is None:
        return None
    text = str(value).removeprefix("torch.").strip().lower()
    if text in PRECISION_DTYPES:
        return PRECISION_DTYPES[text]
    raise ConfigError(f"{where} is {value!r}; use bf16, fp16 or fp32 (or a torch dtype)")


@dataclass
class FullyShardedDataParallelPlugin:
    """Options of the ``fsdp`` strategy (Accelerate's ``FullyShardedDataParallelPlugin``).

    Pass one to ``Accelerator(fsdp_plugin=...)`` to select FSDP with these options; options
    left ``None`` are read from ``FSDP_*`` environment variables (set by ``drivetrain launch``
    from the config file or its ``--fsdp-*`` options), else take the default below. After
    construction every option holds its resolved value (strategy and policy names as
    upper-case strings).

    Args:
        fsdp_version: 1 (``FullyShardedDataParallel`` wrapper) or 2 (``fully_shard``).
            Default 1 when nothing names one, as in Accelerate; ``drivetrain config`` writes 2.
        sharding_strategy: ``FULL_SHARD`` (parameters, gradients and optimizer state
            sharded, ZeRO-3), ``SHARD_GRAD_OP`` (parameters gathered from forward to
            backward, ZeRO-2), ``NO_SHARD`` (replicated, like DDP), ``HYBRID_SHARD`` (full
            sharding within a machine, replicas across machines), ``HYBRID_SHARD_ZERO2``.
            Also 1..5 or a ``torch.distributed.fsdp.ShardingStrategy``. Default ``FULL_SHARD``.
        reshard_after_forward: FSDP2's name for the same choice: ``True`` frees gathered
            parameters after forward (``FULL_SHARD``), ``False`` keeps them for backward
            (``SHARD_GRAD_OP``). A strategy name is accepted too (Accelerate's FSDP1 configs).
            Given together with ``sharding_strategy``, the two must agree. After construction,
            as in Accelerate, FSDP1 holds ``sharding_strategy`` (``reshard_after_forward`` is
            ``None``) and FSDP2 ``reshard_after_forward`` (``sharding_strategy`` is ``None``);
            ``resolved_sharding_strategy`` names the choice under both.
        backward_prefetch: ``BACKWARD_PRE`` (default), ``BACKWARD_POST`` (FSDP1 only) or
            ``NO_PREFETCH``: when the next unit's parameters are gathered during backward.
        mixed_precision_policy: dtypes FSDP computes, reduces and keeps buffers in: a
            ``MixedPrecision`` (FSDP1), a ``MixedPrecisionPolicy`` (FSDP2), a dict of
            ``param_dtype``/``reduce_dtype``/``buffer_dtype``/``output_dtype`` (dtype or
            ``"bf16"``-style names), or one name for all. Default: from the run's
            ``mixed_precision``.
        auto_wrap_policy: which sub-modules become their own FSDP unit (gathered and freed
            on their own): ``TRANSFORMER_BASED_WRAP`` (instances of
            ``transformer_cls_names_to_wrap``, else the model's ``_no_split_modules``),
            ``SIZE_BASED_WRAP`` (modules with at least ``min_num_params`` parameters),
            ``NO_WRAP`` (one unit for the whole model, the default), or a torch FSDP1 policy
            callable ``(module, recurse, nonwrapped_numel) -> bool``.
        cpu_offload: keep parameters and gradients in CPU memory and the optimizer step on
            the CPU (``True``, ``CPUOffload`` or ``CPUOffloadPolicy``); needs an accelerator.
        ignored_modules: modules (or a regular expression matching module names) that FSDP
            leaves alone: not sharded, and their gradients not synchronised.
        state_dict_type: how ``save_state`` writes models and optimizers:
            ``SHARDED_STATE_DICT`` (each process writes its shards through
            ``torch.distributed.checkpoint``; loads on any number of processes) or
            ``FULL_STATE_DICT`` (gathered and written by the main process). Default
            ``FULL_STATE_DICT`` for FSDP1 and ``SHARDED_STATE_DICT`` for FSDP2, as in Accelerate.
        state_dict_config, optim_state_dict_config: torch's ``FullStateDictConfig`` /
            ``FullOptimStateDictConfig``; their ``offload_to_cpu`` is honoured when a full state
            dict is gathered.
        limit_all_gathers: FSDP1's rate limiter of all-gathers (default ``True``).
        use_orig_params: FSDP1 keeps the model's own ``nn.Parameter`` objects (needed for
            several parameter groups, frozen parameters mixed with trainable ones, and
            optimizers created before ``prepare``). Default ``True``; FSDP2 always does.
        param_init_fn: FSDP1's initialiser of modules on the meta device.
        sync_module_states: broadcast the main process's parameters and buffers when
            wrapping, so every process starts from its weights. Default ``False``, ``True``
            with ``cpu_ram_efficient_loading``.
        forward_prefetch: gather the next unit's parameters while the current one computes
            in forward (static graphs only). Default ``False``.
        activation_checkpointing: recompute each wrapped unit's activations in backward
            instead of keeping them. Default ``False``.
        cpu_ram_efficient_loading: only the main process holds real weights (the others may
            build the model on the meta device); they are broadcast while sharding. Needs
            ``sync_module_states``.
        transformer_cls_names_to_wrap: class names for ``TRANSFORMER_BASED_WRAP``
            (list, or comma-separated).
        min_num_params: threshold of ``SIZE_BASED_WRAP`` (default 100,000,000).
    """

    fsdp_version: int | None = None
    sharding_strategy: Any = None
    reshard_after_forward: Any = None
    backward_prefetch: Any = None
    mixed_precision_policy: Any = None
    auto_wrap_policy: Any = None
    cpu_offload: Any = None
    ignored_modules: Any = None
    state_dict_type: Any = None
    state_dict_config: Any = None
    optim_state_dict_config: Any = None
    limit_all_gathers: bool = True
    use_orig_params: bool | None = None
    param_init_fn: Callable[..., Any] | None = None
    sync_module_states: bool | None = None
    forward_prefetch: bool | None = None
    activation_checkpointing: bool | None = None
    cpu_ram_efficient_loading: bool | None = None
    transformer_cls_names_to_wrap: Any = None
    min_num_params: int | None = None

    def __post_init__(self) -> None:
        self._resolve(None)

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> "FullyShardedDataParallelPlugin":
        """The options the environment ``env`` describes (what a launched process will see)."""
        plugin = cls.__new__(cls)
        for spec in fields(cls):
            setattr(plugin, spec.name, spec.default)
        plugin._resolve(env)
        return plugin

    # ------------------------------------------------------------------ resolution

    def _resolve(self, env: Mapping[str, str] | None) -> None:
        given = {spec.name for spec in fields(self) if getattr(self, spec.name) is not None}
        from_env: set[str] = set()
        for name, variable in ENV.items():
            if getattr(self, name) is None:
                value = _read(variable, env)
                if value is not None:
                    setattr(self, name, value)
                    from_env.add(name)
        self._given = given | from_env  # options the user set, by any route
        self._resolve_version(from_env)
        self._resolve_sharding(from_env)
        self._resolve_wrapping(from_env)
        self._resolve_flags(from_env)
        self._resolve_state_dict(from_env)
        self._resolve_offload(from_env)
        self._resolve_ignored(from_env)
        self.mixed_precision_policy = self._precision_policy(self.mixed_precision_policy)

    def _resolve_version(self, from_env: set[str]) -> None:
        version = self.fsdp_version if self.fsdp_version is not None else 1
        try:
            version = int(str(version).strip())
        except ValueError:
            version = None
        if version not in FSDP_VERSIONS:
            raise ConfigError(f"{_where('fsdp_version', 'fsdp_version' in from_env)} is {self.fsdp_version!r}; "
                              "use 1 (FullyShardedDataParallel) or 2 (fully_shard)")
        self.fsdp_version = version

    def _resolve_sharding(self, from_env: set[str]) -> None:
        strategy = None
        if self.sharding_strategy is not None:
            strategy = _sharding_strategy(self.sharding_strategy,
                                          _where("sharding_strategy", "sharding_strategy" in from_env))
        reshard = self.reshard_after_forward
        if reshard is not None:
            where = _where("reshard_after_forward", "reshard_after_forward" in from_env)
            reshard = _enum_name(reshard)
            if isinstance(reshard, str) and reshard.strip().upper() in SHARDING_STRATEGIES + tuple("12345"):
                named = _sharding_strategy(reshard, where)
                if strategy is not None and strategy != named:
                    raise ConfigError(f"{where} is {named} but sharding_strategy is {strategy}; they name the "
                                      "same choice: give one of them")
                strategy = named
                reshard = named not in KEEPS_PARAMETERS_AFTER_FORWARD
            else:
                reshard = _to_bool(reshard, where)
                if strategy is not None and reshard != (strategy not in KEEPS_PARAMETERS_AFTER_FORWARD):
                    raise ConfigError(
                        f"{where} is {reshard} but sharding_strategy {strategy} "
                        f"{'keeps' if strategy in KEEPS_PARAMETERS_AFTER_FORWARD else 'frees'} the gathered "
                        "parameters after forward; remove one of the two options")
                if strategy is None:
                    strategy = "FULL_SHARD" if reshard else "SHARD_GRAD_OP"
        self._sharding = strategy or OptionName("FULL_SHARD")
        # Accelerate's view: FSDP1 holds the strategy (reshard_after_forward None), FSDP2 whether
        # to free gathered parameters after forward (sharding_strategy None); the choice itself
        # stays in resolved_sharding_strategy (FSDP2's HYBRID_SHARD needs it)
        frees = self._sharding not in KEEPS_PARAMETERS_AFTER_FORWARD
        self.sharding_strategy = self._sharding if self.fsdp_version == 1 else None
        self.reshard_after_forward = frees if self.fsdp_version == 2 else None

    @property
    def resolved_sharding_strategy(self) -> OptionName:
        """The sharding choice under either version (``FULL_SHARD``, ``SHARD_GRAD_OP``, ...)."""
        return self._sharding

    def _resolve_wrapping(self, from_env: set[str]) -> None:
        policy = self.auto_wrap_policy
        if policy is None:
            policy = "NO_WRAP"
        if not callable(policy) or isinstance(policy, str):
            policy = _choice(policy, AUTO_WRAP_POLICIES, _where("auto_wrap_policy", "auto_wrap_policy" in from_env))
        self.auto_wrap_policy = policy
        names = self.transformer_cls_names_to_wrap
        if isinstance(names, str):
            names = [part.strip() for part in names.split(",") if part.strip()]
        self.transformer_cls_names_to_wrap = list(names) if names else None
        if self.min_num_params is None:
            self.min_num_params = DEFAULT_MIN_NUM_PARAMS
        try:
            self.min_num_params = int(str(self.min_num_params).strip().replace("_", ""))
        except ValueError:
            raise ConfigError(f"{_where('min_num_params', 'min_num_params' in from_env)} is {self.min_num_params!r}; "
                              "give a whole number of parameters") from None
        if self.min_num_params < 0:
            raise ConfigError(f"min_num_params must be at least 0, not {self.min_num_params}")
        self._resolve_prefetch(from_env)

    def _resolve_prefetch(self, from_env: set[str]) -> None:
        """As in Accelerate: ``NO_PREFETCH`` is held as ``None``; FSDP2, which always gathers the
        next unit ahead in backward, holds ``None`` whatever was asked (with a warning when a
        policy was named). ``prefetches_in_backward`` keeps the choice: ``NO_PREFETCH`` still
        turns FSDP2's prefetching off."""
        prefetch = self.backward_prefetch
        chosen = OptionName("BACKWARD_PRE") if prefetch is None else _choice(
            prefetch, BACKWARD_PREFETCH, _where("backward_prefetch", "backward_prefetch" in from_env))
        self._prefetches_in_backward = chosen != "NO_PREFETCH"
        if self.fsdp_version == 2:
            if prefetch is not None and chosen != "NO_PREFETCH":
                logger.warning("backward_prefetch is not supported in FSDP2. Setting backward prefetch to None. "
                               "(FSDP2 always gathers the next unit ahead in backward; NO_PREFETCH turns that off)")
            self.backward_prefetch = None
        else:
            self.backward_prefetch = None if chosen == "NO_PREFETCH" else chosen

    @property
    def prefetches_in_backward(self) -> bool:
        """Whether the next unit's parameters are gathered ahead of time in backward."""
        return getattr(self, "_prefetches_in_backward", self.backward_prefetch is not None)

    def _resolve_flags(self, from_env: set[str]) -> None:
        for name, default in (("use_orig_params", True), ("forward_prefetch", False),
                              ("activation_checkpointing", False), ("cpu_ram_efficient_loading", False),
                              ("limit_all_gathers", True)):
            value = getattr(self, name)
            setattr(self, name, default if value is None else _to_bool(value, _where(name, name in from_env)))
        if self.sync_module_states is None:
            self.sync_module_states = self.cpu_ram_efficient_loading
        else:
            self.sync_module_states = _to_bool(self.sync_module_states,
                                               _where("sync_module_states", "sync_module_states" in from_env))
        if self.cpu_ram_efficient_loading and not self.sync_module_states:
            raise ConfigError("cpu_ram_efficient_loading needs sync_module_states: only the main process holds the "
                              "weights, and the others would train from random or empty ones; set "
                              "sync_module_states to true (or leave it unset)")
        if self.fsdp_version == 2 and not self.use_orig_params:
            logger.warning("use_orig_params=False has no meaning with FSDP2, which always keeps the model's own "
                           "parameters; it is ignored")
            self.use_orig_params = True

    def _resolve_state_dict(self, from_env: set[str]) -> None:
        where = _where("state_dict_type", "state_dict_type" in from_env)
        kind = self.state_dict_type
        if kind is None:
            kind = "FULL_STATE_DICT" if self.fsdp_version == 1 else "SHARDED_STATE_DICT"
        if str(_enum_name(kind)).strip().upper() == "LOCAL_STATE_DICT":
            if self.fsdp_version == 2:
                raise ConfigError(f"{where} is LOCAL_STATE_DICT, which FSDP2 does not have; use SHARDED_STATE_DICT "
                                  "(each process writes its shards, loadable on any number of processes) or "
                                  "FULL_STATE_DICT")
            # Accelerate's per-process files, readable only by the same processes and wrapping: the
            # sharded layout is as fast and reads anywhere, so it is what gets written.
            logger.warning("state_dict_type LOCAL_STATE_DICT is written as SHARDED_STATE_DICT: each process writes "
                           "its own shards, and any number of processes can load them")
            self.state_dict_type = OptionName("LOCAL_STATE_DICT")
        else:
            self.state_dict_type = _choice(kind, STATE_DICT_TYPES, where)
        full = self.state_dict_type == "FULL_STATE_DICT"
        for name in ("state_dict_config", "optim_state_dict_config"):
            if getattr(self, name) is None or isinstance(getattr(self, name), StateDictSettings):
                setattr(self, name, StateDictSettings(offload_to_cpu=True, rank0_only=full))

    @property
    def writes_sharded_state(self) -> bool:
        """Whether ``save_state`` writes each process's shards (rather than one gathered state dict)."""
        return self.state_dict_type in ("SHARDED_STATE_DICT", "LOCAL_STATE_DICT")

    def _resolve_offload(self, from_env: set[str]) -> None:
        offload = self.cpu_offload
        if offload is None:
            self.cpu_offload = CpuOffload(False)
        elif isinstance(offload, (bool, str, CpuOffload)):
            self.cpu_offload = CpuOffload(offload if isinstance(offload, CpuOffload) else
                                          _to_bool(offload, _where("cpu_offload", "cpu_offload" in from_env)))
        # else: a torch CPUOffload / CPUOffloadPolicy object, read when wrapping

    @property
    def offloads_parameters(self) -> bool:
        """Whether parameters live in CPU memory between uses."""
        offload = self.cpu_offload
        if isinstance(offload, (bool, CpuOffload)):
            return bool(offload)
        return bool(getattr(offload, "offload_params", True))  # CPUOffloadPolicy has no field: it offloads

    def _resolve_ignored(self, from_env: set[str]) -> None:
        ignored = self.ignored_modules
        if isinstance(ignored, str):
            try:
                re.compile(ignored)
            except re.error as error:
                raise ConfigError(f"{_where('ignored_modules', 'ignored_modules' in from_env)} is not a valid regular "
                                  f"expression ({error})") from None

    def _one_dtype_policy(self, name: str, buffer_autocast: bool = False) -> PrecisionPolicy:
        """``name`` for parameters and reductions, and for what the version casts besides: FSDP1's
        buffers (fp32 with ``buffer_autocast``), FSDP2's forward outputs, as in Accelerate."""
        third = ("buffer_dtype", "float32" if buffer_autocast else name) if self.fsdp_version == 1 \
            else ("output_dtype", name)
        return PrecisionPolicy(param_dtype=name, reduce_dtype=name, **dict([third]))

    def _precision_policy(self, policy: Any) -> Any:
        """A dict policy with its dtypes as names (``"bfloat16"``); torch policy objects pass."""
        if policy is None:
            return None
        if isinstance(policy, str):
            return self._one_dtype_policy(dtype_name(policy, "mixed_precision_policy"))
        if isinstance(policy, Mapping):
            allowed = ("param_dtype", "reduce_dtype", "buffer_dtype", "output_dtype", "cast_forward_inputs")
            unknown = sorted(set(policy) - set(allowed))
            if unknown:
                raise ConfigError(f"mixed_precision_policy has unknown key(s) {unknown}; allowed: {', '.join(allowed)}")
            return PrecisionPolicy({key: (value if key == "cast_forward_inputs" else
                                          dtype_name(value, f"mixed_precision_policy.{key}"))
                                    for key, value in policy.items()})
        return policy

    # ----------------------------------------------------------------- Accelerate API

    def set_mixed_precision(self, mixed_precision: str, buffer_autocast: bool = False, override: bool = False) -> None:
        """Use the run's ``mixed_precision`` (``"bf16"``, ``"fp16"``) as the policy, unless one was
        given (``override=True`` replaces it). Buffers stay fp32 with ``buffer_autocast``."""
        if self.mixed_precision_policy is not None and not override:
            return
        name = dtype_name(mixed_precision, "mixed_precision")
        if name is None or name == "float32":
            return
        self.mixed_precision_policy = self._one_dtype_policy(name, buffer_autocast)

    def set_auto_wrap_policy(self, model: Any) -> None:
        """Turn the named ``auto_wrap_policy`` into torch's callable for ``model``, as Accelerate
        does before wrapping: ``TRANSFORMER_BASED_WRAP`` over the classes named (else the model's
        ``_no_split_modules``; a class the model lacks is refused), ``SIZE_BASED_WRAP`` with
        ``min_num_params`` (0 or ``NO_WRAP``: ``None``, no units of their own)."""
        from .wrap import torch_auto_wrap_policy

        self.auto_wrap_policy = torch_auto_wrap_policy(model, self)

    def set_state_dict_type(self, state_dict_type: Any = None) -> None:
        """Switch how checkpoints are written (``"FULL_STATE_DICT"``, ``"SHARDED_STATE_DICT"``)."""
        self.state_dict_type = None if state_dict_type is None else state_dict_type
        self._resolve_state_dict(set())

    def __repr__(self) -> str:
        shown = ", ".join(f"{spec.name}={getattr(self, spec.name)!r}" for spec in fields(self)
                          if getattr(self, spec.name) is not None)
        return f"FullyShardedDataParallelPlugin({shown})"


def environment_of(values: Mapping[str, Any]) -> dict[str, str]:
    """Variables that carry option ``values`` (``{"sharding_strategy": "FULL_SHARD"}``) to a child."""
    env: dict[str, str] = {}
    for name, value in values.items():
        if value is None or name not in ENV:
            continue
        text = environment.as_env_value(value)
        env[ENV[name]] = text
        env[environment.own_name(ENV[name])] = text
    return env

