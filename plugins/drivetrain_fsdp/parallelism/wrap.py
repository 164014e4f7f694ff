"""Composing the dimensions on a model: tensor parallelism first (each layer's weights split
over ``tp``), then FSDP2 over the data-parallel dimensions (``dp_shard`` and ``cp`` sharded,
``dp_replicate`` replicated: HSDP), through the fsdp plugin's own sharding code."""

from __future__ import annotations

import math
import re
from typing import Any

import torch

from drivetrain.plugin_api import ConfigError

from .strategy import ParallelismStrategy

#: transformers' names of tensor-parallel styles that torch's ``parallelize_module`` can apply.
STYLE_NAMES = ("colwise", "rowwise", "colwise_rep", "colwise_gather_output", "rowwise_rep", "embedding_rowwise",
               "sequence_parallel")


def style_of(name: str, module: torch.nn.Module) -> Any:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    if name == "colwise":
        return ColwiseParallel()
    if name in ("colwise_rep", "colwise_gather_output"):
        return ColwiseParallel(output_layouts=Replicate())
    if name == "rowwise":
        if isinstance(module, torch.nn.Embedding):
            return RowwiseParallel(input_layouts=Replicate())
        return RowwiseParallel()
    if name in ("rowwise_rep", "embedding_rowwise"):
        return RowwiseParallel(input_layouts=Replicate())
    if name == "sequence_parallel":
        return SequenceParallel(sequence_dim=1)
    raise ConfigError(f"tensor-parallel style {name!r} is not supported; use one of {list(STYLE_NAMES)} or pass a "
                      "torch ParallelStyle in TorchTensorParallelConfig(tp_plan={...})")


def plan_of(model: torch.nn.Module, strategy: ParallelismStrategy) -> dict[str, Any]:
    """The model's tensor-parallel plan: the user's, else the one the model carries."""
    handler = strategy.config.tp_handler
    if handler is not None and handler.tp_plan:
        return dict(handler.tp_plan)
    for attribute in ("_tp_plan", "tp_plan"):
        plan = getattr(model, attribute, None)
        if plan:
            return dict(plan)
    config = getattr(model, "config", None)
    base = getattr(config, "base_model_tp_plan", None)
    if base:
        prefix = getattr(model, "base_model_prefix", "")
        has_base = bool(prefix) and isinstance(getattr(model, prefix, None), torch.nn.Module)
        return {(f"{prefix}.{key}" if has_base else key): style for key, style in base.items()}
    raise ConfigError(f"tp_size > 1 needs a tensor-parallel plan, and {type(model).__name__} carries none (no "
                      "_tp_plan or tp_plan attribute); pass one: ParallelismConfig(tp_handler=TorchTensorParallelConfig("
                      "tp_plan={'layers.*.attn.q': 'colwise', ...}))")


def _expanded(model: torch.nn.Module, plan: dict[str, Any], tp_size: int) -> dict[str, Any]:
    """Each module name the plan's patterns match, with its style (checked against ``tp_size``)."""
    names = {name: module for name, module in model.named_modules() if name}
    chosen: dict[str, Any] = {}
    for pattern, style in plan.items():
        # transformers' plans write a layer index as `*`
        regex = re.compile(re.escape(pattern).replace(r"\*", r"\d+"))
        matched = [name for name in names if regex.fullmatch(name)]
        if not matched:
            raise ConfigError(f"the tensor-parallel plan names {pattern!r}, which matches no module of "
                              f"{type(model).__name__}; fix the plan's module names")
        for name in matched:
            module = names[name]
            resolved = style_of(style, module) if isinstance(style, str) else style
            weight = getattr(module, "weight", None)
            if isinstance(weight, torch.Tensor) and any(size % tp_size for size in weight.shape[:2] if size > 1):
                raise ConfigError(f"{name}.weight has shape {tuple(weight.shape)}, which does not split evenly over "
                                  f"tp_size={tp_size}; choose a tp_size that divides it")
            chosen[name] = resolved
    return chosen


def _check_heads(model: torch.nn.Module, tp_size: int) -> None:
    config = getattr(model, "config", None)
    for key in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(config, key, None)
        if isinstance(heads, int) and heads % tp_size:
            raise ConfigError(f"the model has {key}={heads}, which tp_size={tp_size} does not divide; each tensor-"
                              "parallel process must hold whole heads")


def apply_tensor_parallel(model: torch.nn.Module, strategy: ParallelismStrategy) -> None:
    from torch.distributed.tensor.parallel import parallelize_module

    tp_size = strategy.config.tp_size
    _check_heads(model, tp_size)
    plan = _expanded(model, plan_of(model, strategy), tp_size)
    parallelize_module(model, strategy.mesh["tp"], plan)


def fsdp_mesh(strategy: ParallelismStrategy) -> Any:
    """The mesh FSDP2 shards over: ``dp_shard`` (with ``cp``), with ``dp_replicate`` in front
    (HSDP; replicas alone get shard groups of one)."""
    config, mesh = strategy.config, strategy.mesh
    shards = "dp_shard_cp" if config.cp_enabled else "dp_shard"
    if not config.dp_replicate_enabled:
        return config.submesh(shards)
    if config.fsdp_enabled:
        return mesh["dp_replicate", shards]
    # Replicas alone: the mesh has no shard dimension (its size is 1), and FSDP2 replicates only
    # over the first of two dimensions; split dp_replicate into (replicas, 1), same groups and
    # root mesh (check_platform refused a torch without _unflatten before anything was built).
    return config.submesh("dp_replicate")._unflatten(0, (config.dp_replicate_size, 1),
                                                     ("dp_replicate_only", "dp_shard_of_one"))


def wrap_model(model: torch.nn.Module, run: Any) -> torch.nn.Module:
    from .. import wrap as fsdp_wrap

    strategy = run.strategy
    if getattr(model, "_drivetrain_parallelized", False) or fsdp_wrap.version_of(model) is not None:
        return model  # prepared twice
    config = strategy.config
    before = fsdp_wrap.parameters_by_name(model)
    if config.tp_enabled:
        model.to(run.state.device)
        apply_tensor_parallel(model, strategy)
    model._drivetrain_parallelized = True
    if config.dp_enabled or config.cp_enabled:
        return fsdp_wrap.wrap_model(model, run, mesh=fsdp_mesh(strategy), before=before)
    model.to(run.state.device)
    fsdp_wrap.adopt(model, run, before)
    return model


def clip_grad_norm(parameters: list[Any], max_norm: float, norm_type: float) -> torch.Tensor:
    """The total norm of gradients spread over several meshes (TP shards, FSDP shards,
    replicated tensors), after clipping: each parameter's norm is reduced over its own mesh."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.experimental import implicit_replication

    norm_type = float(norm_type)
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    parts = []
    for grad in grads:
        norm = torch.linalg.vector_norm(grad, norm_type)
        parts.append(norm.full_tensor() if isinstance(norm, DTensor) else norm)
    stacked = torch.stack(parts)
    total = stacked.max() if math.isinf(norm_type) else torch.linalg.vector_norm(stacked, norm_type)
    groups: dict[Any, list[Any]] = {}  # one call per mesh: torch's fused multiply wants one
    for parameter in parameters:
        if parameter.grad is not None:
            mesh = parameter.grad.device_mesh if isinstance(parameter.grad, DTensor) else None
            groups.setdefault(mesh, []).append(parameter)
    with implicit_replication():
        for group in groups.values():
            torch.nn.utils.clip_grads_with_norm_(group, max_norm, total)
    return total
