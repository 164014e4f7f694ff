"""Sharding a model with FSDP1 (``FullyShardedDataParallel``) or FSDP2 (``fully_shard``), and
what a training step needs from it: no-sync, gradient clipping over shards, optimizers
pointed at the sharded parameters.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import re
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch
import torch.distributed as dist

from drivetrain.plugin_api import ConfigError, DrivetrainError

from .options import HYBRID_STRATEGIES, KEEPS_PARAMETERS_AFTER_FORWARD, FullyShardedDataParallelPlugin

if TYPE_CHECKING:  # pragma: no cover - the strategy imports this module in its methods, never the reverse
    from .strategy import FSDPStrategy

logger = logging.getLogger(__name__)

# Segments wrappers add to parameter names; removed to compare names before and after wrapping.
_WRAPPER_SEGMENTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


class _Flattened:
    """Marks a parameter that FSDP1 flattened into its unit's ``FlatParameter``."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = weakref.ref(model)


def clean_name(name: str) -> str:
    for segment in _WRAPPER_SEGMENTS:
        name = name.replace(segment, "")
    return name


def quiet() -> contextlib.AbstractContextManager:
    """Silence torch's deprecation chatter about FSDP1 and ShardedTensor (once per call site)."""
    context = warnings.catch_warnings()

    class _Quiet(contextlib.AbstractContextManager):
        def __enter__(self):
            context.__enter__()
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed")
            warnings.filterwarnings("ignore", message=r".*deprecating ShardedTensor.*")
            warnings.filterwarnings("ignore", message=r".*_get_pg_default_device.*")
            warnings.filterwarnings("ignore", message=r".*Multiple backends are registered.*")
            warnings.filterwarnings("ignore", message=r".*FSDP.state_dict_type\(\) and FSDP.set_state_dict_type\(\).*")
            return self

        def __exit__(self, *exc):
            return context.__exit__(*exc)

    return _Quiet()


def version_of(model: Any) -> int | None:
    """1 or 2 for a model FSDP wrapped, ``None`` otherwise."""
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    if isinstance(model, FullyShardedDataParallel):
        return 1
    if isinstance(model, FSDPModule):
        return 2
    return None


def unwrap(model: Any) -> Any:
    from torch.distributed.fsdp import FullyShardedDataParallel

    if isinstance(model, FullyShardedDataParallel):
        return model.module
    return None  # an FSDP2 model is the user's own module


# --------------------------------------------------------------------------- set-up


def ensure_process_group(run: Any) -> None:
    """FSDP needs a process group even for one process: create a private one when alone."""
    if dist.is_initialized():
        return
    if run.state.num_processes > 1:
        raise DrivetrainError("FSDP needs the process group of this job, which is not initialised; start the "
                              "script with `drivetrain launch`")
    dist.init_process_group(run.platform.default_backend, store=dist.HashStore(), rank=0, world_size=1)


def mesh_for(fsdp: FSDPStrategy, run: Any, strategy: str, two_dims: bool) -> Any:
    """The device mesh of ``strategy``: 1-D over every process, or (replicas, shards) for
    hybrid sharding (shards within a machine) and, on FSDP2, NO_SHARD (shard groups of one)."""
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    if strategy in HYBRID_STRATEGIES:
        machines = max(int(getattr(run.state, "num_machines", 1) or 1), 1)
        if world % machines:
            raise ConfigError(f"{strategy} shards within each machine, but {world} processes do not split evenly "
                              f"over {machines} machines")
        shape = (machines, world // machines)
    elif strategy == "NO_SHARD" and two_dims:
        shape = (world, 1)
    else:
        shape = (world,)
    meshes = fsdp.meshes
    if shape not in meshes:
        names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
        meshes[shape] = init_device_mesh(run.platform.device_type, shape, mesh_dim_names=names)
    return meshes[shape]


def _layer_classes(model: torch.nn.Module, options: FullyShardedDataParallelPlugin) -> set[type]:
    names = options.transformer_cls_names_to_wrap
    if not names:
        found = getattr(model, "_no_split_modules", None)
        names = list(found) if found else None
    if not names:
        raise ConfigError("auto_wrap_policy TRANSFORMER_BASED_WRAP needs the layer classes to wrap: set "
                          "transformer_cls_names_to_wrap (fsdp_transformer_layer_cls_to_wrap: MyBlock) or give the "
                          "model a _no_split_modules list")
    classes = {type(module) for module in model.modules() if type(module).__name__ in names}
    missing = sorted(set(names) - {cls.__name__ for cls in classes})
    if missing:  # Accelerate's sentence first: callers match it
        raise ConfigError(f"Could not find the transformer layer class {missing[0]} in the model. "
                          f"transformer_cls_names_to_wrap names {missing}, but the model has no module of that class; "
                          f"its classes include: {', '.join(sorted({type(m).__name__ for m in model.modules()})[:12])}")
    return classes


def torch_auto_wrap_policy(model: torch.nn.Module, options: FullyShardedDataParallelPlugin) -> Callable | None:
    """The options' policy as torch's callable for ``model`` (``None``: no units of their own), as
    Accelerate's ``set_auto_wrap_policy`` makes it: ``transformer_auto_wrap_policy`` over the
    layer classes found in the model, ``size_based_auto_wrap_policy`` (a threshold of 0: none)."""
    from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy, transformer_auto_wrap_policy

    policy = options.auto_wrap_policy
    if policy is None or policy == "NO_WRAP":
        return None
    if policy == "TRANSFORMER_BASED_WRAP":
        return functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=_layer_classes(model, options))
    if policy == "SIZE_BASED_WRAP":
        if options.min_num_params <= 0:
            return None
        return functools.partial(size_based_auto_wrap_policy, min_num_params=options.min_num_params)
    return policy  # a callable already


def units_of(model: torch.nn.Module, options: FullyShardedDataParallelPlugin) -> list[torch.nn.Module]:
    """Sub-modules that become FSDP units, each after every unit inside it (the root excluded)."""
    policy = options.auto_wrap_policy
    if policy is None or policy == "NO_WRAP":  # None: set_auto_wrap_policy found nothing to wrap
        return []
    chosen: list[torch.nn.Module] = []
    if policy == "TRANSFORMER_BASED_WRAP":
        classes = tuple(_layer_classes(model, options))
        chosen = [module for module in model.modules() if module is not model and isinstance(module, classes)]
        return list(reversed(chosen))

    def decide(module: torch.nn.Module, numel: int) -> bool:
        if policy == "SIZE_BASED_WRAP":
            return numel >= options.min_num_params
        return bool(policy(module=module, recurse=False, nonwrapped_numel=numel))

    def visit(module: torch.nn.Module) -> int:  # parameters of `module` not yet in a unit below it
        numel = sum(p.numel() for p in module.parameters(recurse=False))
        numel += sum(visit(child) for child in module.children())
        if module is not model and numel and decide(module, numel):
            chosen.append(module)
            return 0
        return numel

    visit(model)
    return chosen  # post-order: inner units first


def _v1_policy(model: torch.nn.Module, options: FullyShardedDataParallelPlugin) -> Callable | None:
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy, size_based_auto_wrap_policy

    policy = options.auto_wrap_policy
    if policy is None or policy == "NO_WRAP":
        return None
    if policy == "TRANSFORMER_BASED_WRAP":
        return ModuleWrapPolicy(_layer_classes(model, options))
    if policy == "SIZE_BASED_WRAP":
        return functools.partial(size_based_auto_wrap_policy, min_num_params=options.min_num_params)
    return policy


def _dtype(name: Any) -> Any:
    if name is None or isinstance(name, torch.dtype):
        return name
    return getattr(torch, name)


def precision_policy(options: FullyShardedDataParallelPlugin, version: int) -> Any:
    """The options' mixed-precision policy as the object ``version`` takes (``None`` for fp32)."""
    from torch.distributed.fsdp import MixedPrecision, MixedPrecisionPolicy

    policy = options.mixed_precision_policy
    if policy is None:
        return None
    if isinstance(policy, dict):
        values = {key: (value if key == "cast_forward_inputs" else _dtype(value)) for key, value in policy.items()}
    elif isinstance(policy, (MixedPrecision, MixedPrecisionPolicy)):
        values = {key: getattr(policy, key) for key in ("param_dtype", "reduce_dtype", "buffer_dtype", "output_dtype",
                                                        "cast_forward_inputs") if hasattr(policy, key)}
    else:
        raise ConfigError(f"mixed_precision_policy must be a dict, MixedPrecision or MixedPrecisionPolicy, not "
                          f"{type(policy).__name__}")
    if version == 1:
        return MixedPrecision(**{k: v for k, v in values.items() if k in ("param_dtype", "reduce_dtype", "buffer_dtype",
                                                                          "cast_forward_inputs")})
    return MixedPrecisionPolicy(**{k: v for k, v in values.items() if k in ("param_dtype", "reduce_dtype",
                                                                            "output_dtype", "cast_forward_inputs")})


def offload_policy(options: FullyShardedDataParallelPlugin, version: int) -> Any:
    if not options.offloads_parameters:
        return None
    if version == 1:
        from torch.distributed.fsdp import CPUOffload

        return options.cpu_offload if isinstance(options.cpu_offload, CPUOffload) else CPUOffload(offload_params=True)
    from torch.distributed.fsdp import CPUOffloadPolicy

    return options.cpu_offload if isinstance(options.cpu_offload, CPUOffloadPolicy) else CPUOffloadPolicy()


def modules_named(model: torch.nn.Module, pattern: str) -> list[torch.nn.Module]:
    """The submodules whose whole name matches the regular expression ``pattern``."""
    compiled = re.compile(pattern)
    return [module for name, module in model.named_modules() if name and compiled.fullmatch(name)]


def ignored_modules(model: torch.nn.Module, options: FullyShardedDataParallelPlugin) -> list[torch.nn.Module]:
    ignored = options.ignored_modules
    if ignored is None:
        return []
    if isinstance(ignored, str):
        found = modules_named(model, ignored)
        if not found:
            raise ConfigError(f"ignored_modules {ignored!r} matches no module name of the model")
        return found
    return list(ignored)


def _has_meta(model: torch.nn.Module) -> bool:
    return any(t.is_meta for t in (*model.parameters(), *model.buffers()))


def _check_meta(model: torch.nn.Module, options: FullyShardedDataParallelPlugin, device: torch.device) -> bool:
    """Whether this process's copy is on the meta device, refusing what cannot be filled."""
    meta = _has_meta(model)
    # every process must agree on how weights are filled, or the collectives below would hang
    flags = torch.tensor([int(meta), int(dist.get_rank() == 0 and meta)], device=device)
    dist.all_reduce(flags)
    if flags[1] and options.sync_module_states:
        raise ConfigError("the main process's model has weights on the meta device; with cpu_ram_efficient_loading "
                          "the main process must load the real weights and only the others may use the meta device")
    if flags[0] and not options.sync_module_states:
        raise ConfigError("the model has weights on the meta device; set cpu_ram_efficient_loading (or "
                          "sync_module_states) so that they are filled from the main process's copy")
    return meta


# --------------------------------------------------------------------------- wrapping


def parameters_by_name(model: torch.nn.Module) -> list[tuple[str, Any]]:
    return [(clean_name(name), parameter) for name, parameter in model.named_parameters(remove_duplicate=False)]


def wrap_model(model: torch.nn.Module, run: Any, mesh: Any = None,
               before: list[tuple[str, Any]] | None = None) -> torch.nn.Module:
    """Shard ``model`` with the run's options; remember what replaced its parameters.

    A strategy that composes FSDP2 with other dimensions passes its own ``mesh`` (1-D
    shards, or 2-D replicas × shards) and the model's parameters ``before`` it transformed
    them (``parameters_by_name``), so optimizers created earlier still find theirs.
    """
    if version_of(model) is not None:
        return model  # prepared twice
    fsdp = run.strategy
    options = fsdp.options
    ensure_process_group(run)
    before = parameters_by_name(model) if before is None else before
    with quiet():
        if options.fsdp_version == 1:
            if mesh is not None:
                raise ConfigError("sharding over a given device mesh needs FSDP2; set fsdp_version to 2")
            wrapped = _wrap_v1(model, run, options)
        else:
            wrapped = _wrap_v2(model, run, fsdp, options, mesh)
    _remember_replacements(fsdp, wrapped, before, options)
    fsdp.add_model(wrapped)
    return wrapped


def adopt(model: torch.nn.Module, run: Any, before: list[tuple[str, Any]]) -> None:
    """File a model another strategy transformed without sharding it (tensor parallelism
    alone): optimizers created earlier are pointed at its new parameters, checkpoints save it."""
    fsdp = run.strategy
    _remember_replacements(fsdp, model, before, fsdp.options)
    fsdp.add_model(model)


def _checkpointing_policy_check(options: FullyShardedDataParallelPlugin) -> None:
    if options.activation_checkpointing and options.auto_wrap_policy == "NO_WRAP":
        raise ConfigError("activation_checkpointing recomputes each FSDP unit's activations, but auto_wrap_policy "
                          "NO_WRAP makes no units; use TRANSFORMER_BASED_WRAP or SIZE_BASED_WRAP")


def _apply_checkpointing(model: torch.nn.Module, check: Callable[[torch.nn.Module], bool]) -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    apply_activation_checkpointing(
        model, checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
        check_fn=check)


def _v1_strategy(name: str) -> Any:
    from torch.distributed.fsdp import ShardingStrategy

    # torch spells the hybrid ZeRO-2 strategy with a leading underscore
    return getattr(ShardingStrategy, name, None) or getattr(ShardingStrategy, f"_{name}")


def _wrap_v1(model: torch.nn.Module, run: Any, options: FullyShardedDataParallelPlugin) -> torch.nn.Module:
    from torch.distributed.fsdp import BackwardPrefetch, FullyShardedDataParallel

    _checkpointing_policy_check(options)
    device = run.state.device
    meta = _check_meta(model, options, device)
    # torch's own sync_module_states refuses CPU tensors: every platform uses the same broadcast
    source = _main_process_weights(model) if options.sync_module_states else None
    param_init_fn = options.param_init_fn
    if meta and param_init_fn is None:
        def param_init_fn(module: torch.nn.Module) -> None:
            module.to_empty(device=device, recurse=False)
    kwargs: dict[str, Any] = dict(
        sharding_strategy=_v1_strategy(options.resolved_sharding_strategy),
        auto_wrap_policy=_v1_policy(model, options),
        backward_prefetch=BackwardPrefetch[options.backward_prefetch] if options.prefetches_in_backward else None,
        mixed_precision=precision_policy(options, 1),
        cpu_offload=offload_policy(options, 1),
        ignored_modules=ignored_modules(model, options) or None,
        param_init_fn=param_init_fn,
        device_id=device,
        forward_prefetch=options.forward_prefetch,
        limit_all_gathers=options.limit_all_gathers,
        use_orig_params=options.use_orig_params,
    )
    if options.resolved_sharding_strategy in HYBRID_STRATEGIES:
        kwargs["device_mesh"] = mesh_for(run.strategy, run, options.resolved_sharding_strategy, two_dims=True)
    wrapped = FullyShardedDataParallel(model, **kwargs)
    if source is not None:
        _fill_from_main_process(wrapped, source)
    if options.activation_checkpointing:
        units = {id(m) for m in wrapped.modules() if isinstance(m, FullyShardedDataParallel) and m is not wrapped}
        _apply_checkpointing(wrapped, lambda module: id(module) in units)
    return wrapped


def _wrap_v2(model: torch.nn.Module, run: Any, fsdp: FSDPStrategy, options: FullyShardedDataParallelPlugin,
             mesh: Any = None) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    _checkpointing_policy_check(options)
    device = run.state.device
    meta = _check_meta(model, options, device)
    units = units_of(model, options)
    if options.activation_checkpointing:
        chosen = {id(unit) for unit in units}
        _apply_checkpointing(model, lambda module: id(module) in chosen)
        units = [module for module in model.modules()
                 if id(getattr(module, "_checkpoint_wrapped_module", None)) in chosen][::-1]
    ignored = ignored_modules(model, options)
    ignored_params = {p for module in ignored for p in module.parameters()}
    _keep_fp32_master_weights(model, run.selection.mixed_precision)
    offload = offload_policy(options, 2)
    if ignored and not meta and offload is None:
        for module in ignored:
            module.to(device)
    source = None
    if options.sync_module_states:
        source = _main_process_weights(model)
    if mesh is None:
        mesh = mesh_for(fsdp, run, options.resolved_sharding_strategy, two_dims=True)
    kwargs: dict[str, Any] = {"mesh": mesh,
                              "reshard_after_forward": options.resolved_sharding_strategy not in
                              KEEPS_PARAMETERS_AFTER_FORWARD}
    policy = precision_policy(options, 2)
    if policy is not None:
        kwargs["mp_policy"] = policy
    if offload is not None:
        kwargs["offload_policy"] = offload
    if ignored_params:
        kwargs["ignored_params"] = ignored_params
    for unit in units:
        fully_shard(unit, **kwargs)
    fully_shard(model, **kwargs)
    if meta:
        model.to_empty(device="cpu" if offload is not None else device)
    if source is not None:
        _fill_from_main_process(model, source)
    _set_prefetching(model, units, options)
    return model


def _keep_fp32_master_weights(model: torch.nn.Module, mixed_precision: str | None) -> None:
    """FSDP2 needs one original dtype among a unit's parameters, and models often mix them (a
    bf16 checkpoint with fp32 norms). Under mixed precision the policy's ``param_dtype`` casts
    for compute, so trainable low-precision parameters become fp32 master weights, as in
    Accelerate. Not with 4-bit quantized weights (``Params4bit``): a cast would destroy them."""
    if mixed_precision in (None, "no") or any(type(p).__name__ == "Params4bit" for p in model.parameters()):
        return
    upcast = []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad and parameter.dtype != torch.float32:
            parameter.data = parameter.data.to(torch.float32)
            upcast.append(name)
    if upcast and (not dist.is_initialized() or dist.get_rank() == 0):
        logger.info("FSDP2 with mixed precision keeps fp32 master weights: %d parameter(s) stored in lower precision "
                    "were upcast (checkpoints hold them in fp32): %s", len(upcast), ", ".join(upcast[:8]))


def _main_process_weights(model: torch.nn.Module) -> dict[str, Any]:
    """What to broadcast once the model is sharded: the main process's state dict (empty
    elsewhere) and its non-persistent buffers, which state dicts leave out."""
    state = dict(model.state_dict())
    transient = sorted(name for name, _buffer in model.named_buffers() if name not in state)
    main = dist.get_rank() == 0
    return {"state": state if main else {}, "transient": transient,
            "buffers": {name: model.get_buffer(name).detach().clone() for name in transient} if main else {}}


def _fill_from_main_process(model: torch.nn.Module, source: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, source["state"],
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=True))
    buffers = {clean_name(name): buffer for name, buffer in model.named_buffers()}
    for name in source["transient"]:
        buffer = buffers[name]
        if dist.get_rank() == 0:
            buffer.copy_(source["buffers"][name].to(buffer.device))
        dist.broadcast(buffer.data, src=0)


def _set_prefetching(model: torch.nn.Module, units: list[torch.nn.Module], options: FullyShardedDataParallelPlugin
                     ) -> None:
    """Forward prefetch: each unit gathers the next one (in registration order, taken as the
    order of forward); NO_PREFETCH: no unit gathers another ahead of time in backward."""
    position = {id(module): index for index, module in enumerate(model.modules())}
    ordered = sorted(units, key=lambda unit: position[id(unit)])
    if options.forward_prefetch:
        for current, following in zip(ordered, ordered[1:]):
            current.set_modules_to_forward_prefetch([following])
    if not options.prefetches_in_backward:
        for unit in ordered:
            unit.set_modules_to_backward_prefetch([])


def _remember_replacements(fsdp: FSDPStrategy, wrapped: torch.nn.Module, before: list[tuple[str, Any]],
                           options: FullyShardedDataParallelPlugin) -> None:
    after = {clean_name(name): p for name, p in wrapped.named_parameters(remove_duplicate=False)}
    flattened = version_of(wrapped) == 1 and not options.use_orig_params
    marker = _Flattened(wrapped) if flattened else None
    for name, old in before:
        new = after.get(name)
        if new is not None and new is not old:
            fsdp.replaced[old] = new
        elif new is None and marker is not None:
            fsdp.replaced[old] = marker


# ------------------------------------------------------------------------- optimizers


def point_optimizer_at_sharded_parameters(optimizer: Any, run: Any) -> None:
    """Make an optimizer created before ``prepare`` update the sharded parameters.

    Called after every model of the same ``prepare`` call was wrapped.
    """
    fsdp = run.strategy
    if not len(fsdp.replaced):
        return
    inner = getattr(optimizer, "optimizer", optimizer)
    flat_model = None
    changed = False
    new_groups = []
    for group in inner.param_groups:
        params = []
        for parameter in group["params"]:
            target = fsdp.replaced.get(parameter)
            if target is None:
                params.append(parameter)
            elif isinstance(target, _Flattened):
                flat_model = target.model()
                changed = True
            else:
                params.append(target)
                changed = True
        new_groups.append(params)
    if not changed:
        return
    stale = [p for group in inner.param_groups for p in group["params"] if p in fsdp.replaced and p in inner.state]
    if stale:
        raise ConfigError("the optimizer already holds state for parameters that FSDP replaced when sharding; "
                          "create the optimizer (or load its state) after accelerator.prepare(model)")
    if flat_model is not None:
        if len(inner.param_groups) != 1 or new_groups[0]:
            raise ConfigError(
                "FSDP1 with use_orig_params=False flattens each unit's parameters into one, so an optimizer with "
                "several parameter groups (or parameters of several models) created before prepare() cannot be "
                "pointed at them; set use_orig_params=True (fsdp_use_orig_params: true), or create the optimizer "
                "after prepare()")
        new_groups[0] = list(flat_model.parameters())
    for group, params in zip(inner.param_groups, new_groups):
        group["params"] = params


# ------------------------------------------------------------------------- the step


_SYNC_OFF: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def _v2_no_sync(model: Any) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    _SYNC_OFF[model] = True
    try:
        yield
    finally:
        _SYNC_OFF.pop(model, None)
        model.set_requires_gradient_sync(True)


@contextlib.contextmanager
def _v2_sync_now(model: Any) -> Iterator[None]:
    model.set_requires_gradient_sync(True)
    try:
        yield
    finally:
        if _SYNC_OFF.get(model):
            model.set_requires_gradient_sync(False)


def no_sync(model: Any) -> Any:
    version = version_of(model)
    if version == 1:
        return model.no_sync()
    if version == 2:
        return _v2_no_sync(model)
    return None


def sync_in_backward(model: Any) -> Any:
    return _v2_sync_now(model) if version_of(model) == 2 else None


def clip_grad_norm(parameters: list[Any], max_norm: float, norm_type: float, run: Any) -> Any:
    """The total gradient norm over every process's shards, after clipping."""
    from torch.distributed.tensor import DTensor

    wanted = {id(p) for p in parameters}
    for model in run.strategy.models:
        if version_of(model) == 1 and {id(p) for p in model.parameters()} == wanted:
            with quiet():
                return model.clip_grad_norm_(max_norm, norm_type)
    if any(isinstance(p, DTensor) for p in parameters):
        if all(isinstance(p, DTensor) for p in parameters):
            norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)
            return norm.full_tensor() if isinstance(norm, DTensor) else norm
        return _clip_mixed(parameters, max_norm, norm_type)
    if any(version_of(model) == 1 for model in run.strategy.models):
        raise DrivetrainError("with FSDP1, clip_grad_norm_ needs all parameters of one prepared model "
                              "(accelerator.clip_grad_norm_(model.parameters(), ...)); clip a subset with fsdp_version 2")
    return None


def _clip_mixed(parameters: list[Any], max_norm: float, norm_type: float) -> torch.Tensor:
    """Clip sharded (DTensor) parameters together with plain ones (FSDP2's ignored parameters,
    which every process keeps to itself): one total norm over both kinds."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.experimental import implicit_replication

    norm_type = float(norm_type)
    sharded = [p.grad for p in parameters if p.grad is not None and isinstance(p.grad, DTensor)]
    plain = [p.grad for p in parameters if p.grad is not None and not isinstance(p.grad, DTensor)]
    parts = []
    if sharded:
        part = torch.nn.utils.get_total_norm(sharded, norm_type)
        parts.append(part.full_tensor() if isinstance(part, DTensor) else part)
    if plain:
        parts.append(torch.nn.utils.get_total_norm(plain, norm_type).to(parts[0].device if parts else plain[0].device))
    if not parts:
        return torch.tensor(0.0)
    stacked = torch.stack(parts)
    total = stacked.max() if math.isinf(norm_type) else torch.linalg.vector_norm(stacked, norm_type)
    with implicit_replication():
        torch.nn.utils.clip_grads_with_norm_([p for p in parameters if p.grad is not None], max_norm, total)
    return total
