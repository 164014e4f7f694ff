"""The DeepSpeed engine of a prepared model, and everything that goes through it.

``prepare`` hands a model with its optimizer and scheduler (or ``DummyOptim`` /
``DummyScheduler``) to ``deepspeed.initialize`` with the active ``DeepSpeedPlugin``'s config,
its ``"auto"`` values filled. The engine then owns the step: ``accelerator.backward`` runs
``engine.backward`` and ``engine.step`` (which applies the optimizer and the scheduler at
the end of an accumulation window and clears the gradients), so ``optimizer.step()``,
``optimizer.zero_grad()`` and ``scheduler.step()`` of the returned wrappers do nothing, as in
Accelerate. Gradient accumulation is DeepSpeed's own: the window's end is the core's
``sync_gradients``, handed to the engine as its accumulation boundary.

deepspeed is imported here, lazily, the first time a run needs it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import torch

from drivetrain.plugin_api import AcceleratedOptimizer, AcceleratedScheduler, ConfigError, DrivetrainError, prepared_objects

from .autofill import Facts, fill_auto_values, fill_precision
from .inputs import cast_inputs_to_engine_dtype
from .options import AUTO, DeepSpeedPlugin, DummyOptim, DummyScheduler, deepspeed_accelerator, get_key

if TYPE_CHECKING:  # pragma: no cover
    from .strategy import DeepSpeedStrategy

logger = logging.getLogger(__name__)

# ------------------------------------------------------------------ the library


def import_deepspeed(run: Any) -> Any:
    """``deepspeed``, with its accelerator set to this run's platform (``DS_ACCELERATOR``)."""
    wanted = deepspeed_accelerator(run.platform.name, run.platform.device_type)
    if "deepspeed" not in sys.modules:
        current = os.environ.get("DS_ACCELERATOR")
        if current and current != wanted:
            raise ConfigError(f"DS_ACCELERATOR={current} but this run's platform is {run.platform.name!r} "
                              f"(DeepSpeed's {wanted!r}); unset DS_ACCELERATOR or choose the matching platform")
        os.environ["DS_ACCELERATOR"] = wanted
    import deepspeed

    found = getattr(deepspeed.get_accelerator(), "_name", wanted)
    if found != wanted:
        raise ConfigError(f"deepspeed was imported before drivetrain chose the platform and uses its {found!r} "
                          f"accelerator, but this run's platform is {run.platform.name!r}; set "
                          f"DS_ACCELERATOR={wanted} before importing deepspeed, or import it after creating "
                          "the Accelerator")
    return deepspeed


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: How long a one-process group may take to form: it waits for nobody, so longer means a fault.
SINGLE_PROCESS_SETUP = timedelta(seconds=60)


def ensure_process_group(run: Any) -> None:
    """DeepSpeed needs a process group and ``LOCAL_RANK`` even for one process.

    A process that a launcher started (torchrun, srun, mpirun with ``-n 1``) joins the
    rendezvous that launcher prepared (``env://``): under torchrun that is the agent's store,
    and a private ``tcp://`` address there would wait for a store that never answers. Only a
    process no launcher started gets a private address on a free port.
    """
    import torch.distributed as dist

    # A cluster-environment plugin recognised a launcher, and that launcher named a rendezvous.
    launched = run.selection.cluster_plugin is not None and bool(os.environ.get("MASTER_PORT"))
    run.selection.cluster.export()  # RANK, LOCAL_RANK, WORLD_SIZE, MASTER_* (never overrides)
    if dist.is_available() and dist.is_initialized():
        return
    run.call("drivetrain_init_distributed", timeout=SINGLE_PROCESS_SETUP, backend=None,
             init_method=None if launched else f"tcp://127.0.0.1:{_free_port()}")


def is_engine(obj: Any) -> bool:
    deepspeed = sys.modules.get("deepspeed")
    return deepspeed is not None and isinstance(obj, deepspeed.DeepSpeedEngine)


def is_zero3(engine: Any) -> bool:
    return engine.zero_optimization_partition_weights()


def trains(engine: Any) -> bool:
    """Whether the engine was built with an optimizer (ZeRO-3 gives frozen engines a
    parameter-offload object in ``engine.optimizer``, so that cannot tell)."""
    return bool(getattr(engine, "_drivetrain_trains", engine.optimizer is not None))


# ------------------------------------------------------------------ prepare


def _is_scheduler(obj: Any) -> bool:
    return isinstance(obj, torch.optim.lr_scheduler.LRScheduler) or (
        hasattr(obj, "step") and hasattr(obj, "get_last_lr") and hasattr(obj, "optimizer"))


def _micro_batch_sizes(objects: Sequence[Any], accelerator: Any, world_size: int) -> list[int]:
    loaders = [o for o in objects if isinstance(o, torch.utils.data.DataLoader)] or list(prepared_objects(accelerator).dataloaders)
    sizes = []
    for loader in loaders:
        total = getattr(loader, "total_batch_size", None)
        if isinstance(total, int) and total > 0:
            sizes.append(max(total // max(world_size, 1), 1))
        elif isinstance(getattr(loader, "batch_size", None), int):
            sizes.append(loader.batch_size)
    return sizes


def _hidden_size(model: torch.nn.Module) -> int | None:
    config = getattr(model, "config", None)
    if config is None:
        return None
    read = config.get if isinstance(config, Mapping) else lambda key, default=None: getattr(config, key, default)
    size = read("hidden_size", None)
    if isinstance(size, int):
        return size
    sizes = read("hidden_sizes", None)
    if isinstance(sizes, (list, tuple)) and sizes:
        return int(max(sizes))
    return None


def prepare_engine(strategy: DeepSpeedStrategy, run: Any, objects: Sequence[Any],
                   accelerator: Any) -> list[Any] | None:
    """Build one engine from the model, optimizer and scheduler among ``objects``, with the
    strategy's active ``DeepSpeedPlugin``; the strategy keeps the engine."""
    models = [i for i, o in enumerate(objects) if isinstance(o, torch.nn.Module) and not is_engine(o)]
    optimizers = [i for i, o in enumerate(objects) if isinstance(o, (torch.optim.Optimizer, DummyOptim))
                  and not isinstance(o, AcceleratedOptimizer)]
    schedulers = [i for i, o in enumerate(objects) if (isinstance(o, DummyScheduler) or _is_scheduler(o))
                  and not isinstance(o, AcceleratedScheduler)]
    from .sequence_parallel import layout_of, register_attention, wrap_data_loader

    layout = layout_of(run)

    def with_sequence_slices(result: list[Any]) -> list[Any]:
        # each prepared loader hands this process its sequence slice of its group's batches
        if layout is None:
            return result
        return [wrap_data_loader(o, layout, accelerator.device) if isinstance(o, torch.utils.data.DataLoader) else o
                for o in result]

    if not (models or optimizers or schedulers):
        # data loaders only: the core has prepared them
        return with_sequence_slices(list(objects)) if layout is not None else None
    if len(models) != 1:
        raise ConfigError(
            "with DeepSpeed, each prepare() call takes one model (with its optimizer and scheduler); "
            + ("prepare the others in their own calls, choosing each one's DeepSpeedPlugin with "
               "accelerator.state.select_deepspeed_plugin(name)" if models else
               "pass the model to the same call as its optimizer and scheduler"))
    if len(optimizers) > 1 or len(schedulers) > 1:
        raise ConfigError("with DeepSpeed, one prepare() call takes one optimizer and one scheduler")
    model = objects[models[0]]
    optimizer = objects[optimizers[0]] if optimizers else None
    scheduler = objects[schedulers[0]] if schedulers else None
    plugin = strategy.deepspeed_plugin
    origin = plugin.config_origin
    config = dict(plugin.deepspeed_config)

    has_optimizer_block, has_scheduler_block = "optimizer" in config, "scheduler" in config
    if isinstance(optimizer, DummyOptim) and not has_optimizer_block:
        raise ConfigError(f"DummyOptim needs an \"optimizer\" block in the DeepSpeed config ({origin}); pass a "
                          "torch optimizer instead, or add the block")
    if optimizer is not None and not isinstance(optimizer, DummyOptim) and has_optimizer_block:
        raise ConfigError(f"{origin} defines an optimizer, so pass DummyOptim(model.parameters(), lr=...) to prepare() "
                          f"instead of a {type(optimizer).__name__} (or remove the optimizer block)")
    if isinstance(scheduler, DummyScheduler) and not has_scheduler_block and scheduler.lr_scheduler_callable is None:
        raise ConfigError(f"DummyScheduler needs a \"scheduler\" block in the DeepSpeed config ({origin}) or "
                          "lr_scheduler_callable=; pass a torch scheduler instead, or add the block")
    if scheduler is not None and not isinstance(scheduler, DummyScheduler) and has_scheduler_block:
        raise ConfigError(f"{origin} defines a scheduler, so pass DummyScheduler(optimizer, total_num_steps=..., "
                          f"warmup_num_steps=...) to prepare() instead of a {type(scheduler).__name__} "
                          "(or remove the scheduler block)")
    if scheduler is not None and optimizer is None:
        raise ConfigError("a scheduler was given to prepare() without its optimizer; pass both with the model")

    world = run.state.num_processes
    facts = Facts(
        # with sequence parallelism, the processes of a group work on one batch
        world_size=world // (layout.sp_size if layout is not None else 1),
        gradient_accumulation_steps=accelerator.gradient_accumulation_steps,
        micro_batch_sizes=_micro_batch_sizes(objects, accelerator, world),
        is_train_batch_min=plugin.is_train_batch_min,
        mixed_precision=run.selection.mixed_precision,
        gradient_clipping=plugin.gradient_clipping,
        save_16bit_model=bool(plugin.zero3_save_16bit_model),
        hidden_size=_hidden_size(model),
        model_has_config=getattr(model, "config", None) is not None,
    )
    learning_rate = None
    if isinstance(optimizer, DummyOptim):
        facts.optimizer_params = {"lr": optimizer.lr, "weight_decay": optimizer.weight_decay, **optimizer.kwargs}
        learning_rate = optimizer.lr
    elif optimizer is not None and optimizer.param_groups:
        learning_rate = optimizer.param_groups[0].get("lr")
    if isinstance(scheduler, DummyScheduler) and scheduler.lr_scheduler_callable is None:
        total = scheduler.total_num_steps
        if total is not None and not accelerator.split_batches:
            total = math.ceil(total / world)  # counted like a scheduler of one process, as in Accelerate
        facts.scheduler_params = {"warmup_min_lr": 0, "warmup_max_lr": learning_rate,
                                  "warmup_num_steps": scheduler.warmup_num_steps, "total_num_steps": total,
                                  **scheduler.kwargs}
        facts.scheduler_params = {k: v for k, v in facts.scheduler_params.items() if v is not None}
    elif has_scheduler_block and learning_rate is not None:
        facts.scheduler_params = {"warmup_max_lr": learning_rate, "warmup_min_lr": 0}

    if optimizer is not None and not isinstance(optimizer, DummyOptim):
        config.setdefault("zero_allow_untested_optimizer", True)
        if str(get_key(config, "zero_optimization.offload_optimizer.device", "none")).lower() != "none":
            # DeepSpeed refuses a client optimizer with optimizer offload unless told; the user chose it.
            config.setdefault("zero_force_ds_cpu_optimizer", False)
    config = fill_auto_values(config, facts, origin)
    plugin.replace_config(config)  # what the engine runs with, for the user (and transformers) to read

    deepspeed = import_deepspeed(run)
    ensure_process_group(run)
    if plugin.transformer_moe_cls_names and plugin.zero_stage == 3:
        names = [name.strip() for name in str(plugin.transformer_moe_cls_names).split(",") if name.strip()]
        deepspeed.utils.set_z3_leaf_modules(model, names)
    kwargs: dict[str, Any] = {"model": model, "config": config}
    if layout is not None:
        kwargs["mpu"] = register_attention(model, layout, (facts.micro_batch_sizes or [1])[0])
    if isinstance(optimizer, DummyOptim):
        kwargs["model_parameters"] = optimizer.params
    elif optimizer is not None:
        kwargs["optimizer"] = optimizer
    if isinstance(scheduler, DummyScheduler):
        if scheduler.lr_scheduler_callable is not None:
            kwargs["lr_scheduler"] = scheduler.lr_scheduler_callable
    elif scheduler is not None:
        kwargs["lr_scheduler"] = scheduler
    initialize = deepspeed.initialize
    if plugin.enable_msamp:
        initialize = _msamp_initialize(config, plugin)
    _forget_groups_of_an_earlier_world(deepspeed)
    try:
        with _broadcast_accepting_scalars(deepspeed):
            engine, engine_optimizer, _loader, engine_scheduler = initialize(**kwargs)
    except (ValueError, TypeError, AssertionError) as exc:
        message = " ".join(str(exc).split())
        raise ConfigError(f"DeepSpeed refused the engine ({origin}): {message}") from exc
    engine._drivetrain_plugin = plugin
    engine._drivetrain_trains = optimizer is not None
    cast_inputs_to_engine_dtype(engine)  # fp32 batches reach a bf16/fp16 model in its dtype
    strategy.engines.add(engine)

    result = list(objects)
    result[models[0]] = engine
    if optimizer is not None:
        wrapped_optimizer = DeepSpeedOptimizerWrapper(engine_optimizer, engine)
        result[optimizers[0]] = wrapped_optimizer
        if scheduler is not None:
            result[schedulers[0]] = DeepSpeedSchedulerWrapper(engine_scheduler or scheduler, [wrapped_optimizer],
                                                              engine)
    return with_sequence_slices(result)


def _is_dead(group: Any) -> bool:
    import torch.distributed as dist

    if not isinstance(group, dist.ProcessGroup):
        return False
    try:
        dist.get_process_group_ranks(group)
    except (RuntimeError, ValueError, KeyError):  # "Group ... is not registered"
        return True
    return False


def _forget_groups_of_an_earlier_world(deepspeed: Any) -> None:
    """Drop the process groups DeepSpeed cached (``deepspeed.utils.groups``) that belong to a
    default group destroyed since: DeepSpeed keeps them for the life of the process, so a second
    engine after the group was made again (a second job in one process, a notebook) failed with
    "Group ... is not registered". DeepSpeed makes the groups it lacks again."""
    groups = deepspeed.utils.groups
    for name, value in list(vars(groups).items()):
        if not (name.startswith("_") and name.endswith("GROUP")):
            continue
        if isinstance(value, dict):
            for key in [key for key, group in value.items() if _is_dead(group)]:
                del value[key]
        elif _is_dead(value):
            setattr(groups, name, None)


@contextlib.contextmanager
def _broadcast_accepting_scalars(deepspeed: Any) -> Iterator[None]:
    """While the engine is built, its start-up broadcast of the parameters sees a 0-dimensional
    parameter (a model's scalar weight, as transformers' test models have) as one element.

    DeepSpeed broadcasts each parameter as ``p.data.view(torch.uint8)``, which torch refuses for
    0-dimensional tensors ("self.dim() cannot be 0 to view Float as Byte"). The broadcast writes
    in place, so the scalar keeps the value rank 0 sent, and its shape is restored before
    anything else (ZeRO's flat buffers, checkpoints) sees the parameter.
    """
    engine_class = deepspeed.runtime.engine.DeepSpeedEngine
    original = engine_class.__dict__.get("_broadcast_model")
    if original is None:  # another DeepSpeed: nothing to adapt
        yield
        return

    def broadcast_model(engine: Any) -> None:
        scalars = [(p, p.data) for p in engine.module.parameters() if torch.is_tensor(p) and p.dim() == 0]
        for parameter, data in scalars:
            parameter.data = data.view(1)
        try:
            original(engine)
        finally:
            for parameter, data in scalars:
                parameter.data = data

    engine_class._broadcast_model = broadcast_model
    try:
        yield
    finally:
        engine_class._broadcast_model = original


def _msamp_initialize(config: dict[str, Any], plugin: DeepSpeedPlugin) -> Any:
    try:
        from msamp import deepspeed as msamp_deepspeed  # type: ignore[import-not-found]
    except ImportError:
        raise ConfigError("enable_msamp needs MS-AMP, which is not installed (it is not on the package index: "
                          "install it from its source tree), or set enable_msamp=False") from None
    config["msamp"] = {"enabled": True, "opt_level": plugin.msamp_opt_level}
    return msamp_deepspeed.initialize


class DeepSpeedOptimizerWrapper(AcceleratedOptimizer):
    """The optimizer of a DeepSpeed engine, as ``prepare`` returns it.

    The engine steps it (and clears the gradients) in ``accelerator.backward`` at the end of
    each accumulation window, so ``step`` and ``zero_grad`` do nothing here.
    """

    def __init__(self, optimizer: Any, engine: Any) -> None:
        super().__init__(optimizer, device_placement=False)
        self.engine = engine

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        return None

    def step(self, closure: Any = None) -> None:
        return None

    @property
    def step_was_skipped(self) -> bool:
        """Whether the engine skipped its last step (fp16 overflow)."""
        return bool(getattr(self.engine.optimizer, "overflow", False))

    def __repr__(self) -> str:
        return f"DeepSpeedOptimizerWrapper({type(self.optimizer).__name__})"


class DeepSpeedSchedulerWrapper(AcceleratedScheduler):
    """The scheduler of a DeepSpeed engine: the engine steps it with the optimizer, so ``step``
    does nothing here; everything else reads through to it."""

    def __init__(self, scheduler: Any, optimizers: Sequence[Any], engine: Any = None) -> None:
        super().__init__(scheduler, optimizers)
        self.engine = engine

    def step(self, *args: Any, **kwargs: Any) -> None:
        return None


# ------------------------------------------------------------------ the step


def backward(models: Sequence[Any], loss: torch.Tensor, kwargs: dict[str, Any]) -> bool | None:
    """``engine.backward`` and ``engine.step`` of the trained engine among ``models``."""
    engines = [m for m in models if is_engine(m) and trains(m)]
    if not engines:
        return None
    if len(engines) > 1:
        raise DrivetrainError(
            f"this Accelerator prepared {len(engines)} DeepSpeed models with optimizers, so backward cannot tell "
            "which one the loss trains; train each with its own Accelerator (they share the process state), "
            "as in Accelerate")
    engine = engines[0]
    from drivetrain.plugin_api import GradientState

    engine.set_gradient_accumulation_boundary(GradientState().sync_gradients)
    engine.backward(loss, **kwargs)
    engine.step()
    return True


def clip_grad_norm(strategy: DeepSpeedStrategy, parameters: Sequence[Any], max_norm: float) -> Any:
    """DeepSpeed clips in its step with ``gradient_clipping``; this returns the global norm it
    measured in its last step, or ``False`` (the facade's ``None``) when it measured none."""
    engine = strategy.engine_of_parameters(parameters)
    if engine is None:
        return None
    configured = engine.gradient_clipping()
    if not strategy._warned_clip and configured != max_norm:
        strategy._warned_clip = True
        logger.warning("DeepSpeed clips gradients in its step with gradient_clipping=%s from its config; the "
                       "max_norm=%s given to clip_grad_norm_ is not used (set gradient_clipping instead)",
                       configured, max_norm)
    norm = engine.get_global_grad_norm()
    if norm is None:
        return False  # not measured (no step yet, or no clipping configured): no number to make up
    if isinstance(norm, torch.Tensor):
        return norm.detach()
    return torch.tensor(float(norm))


def compile_engine(engine: Any, options: Any) -> Any:
    """Compile through the engine (``engine.compile``), which compiles its module in place and
    keeps its own forward and backward hooks; the engine stays the prepared model."""
    engine.compile(backend=options.backend, compile_kwargs=options.compile_kwargs())
    return engine


# ------------------------------------------------------------------ full weights


def full_state_dict(engine: Any, run: Any, plugin: DeepSpeedPlugin) -> dict[str, torch.Tensor]:
    """The whole model's weights on the main process (``{}`` elsewhere), under ZeRO-3.

    Gathered one module at a time (``deepspeed.zero.GatheredParameters``). A trained
    engine in 16-bit gives its fp32 master weights unless ``zero3_save_16bit_model`` asks
    for the 16-bit training weights; in fp32 both are the same.
    """
    deepspeed = sys.modules["deepspeed"]
    from deepspeed.utils import safe_get_full_fp32_param

    main = run.state.is_main_process
    module = engine.module
    masters = (not plugin.zero3_save_16bit_model and trains(engine)
               and any(p.dtype != torch.float32 for p in module.parameters()))
    state: dict[str, torch.Tensor] = {}
    seen: dict[int, str] = {}

    def visit(current: torch.nn.Module, prefix: str) -> None:
        named = [(name, p) for name, p in current.named_parameters(recurse=False) if p is not None]
        if masters:
            for name, parameter in named:
                value = safe_get_full_fp32_param(parameter)  # collective; None for a frozen one
                if value is None:
                    with deepspeed.zero.GatheredParameters([parameter], modifier_rank=0):
                        value = parameter.detach().clone()
                if main:
                    state[prefix + name] = value.detach().cpu().clone()
        else:
            with deepspeed.zero.GatheredParameters([p for _n, p in named], modifier_rank=0):
                if main:
                    for name, parameter in named:
                        key = seen.get(getattr(parameter, "ds_id", id(parameter)))
                        state[prefix + name] = state[key] if key else parameter.detach().cpu().clone()
                        seen.setdefault(getattr(parameter, "ds_id", id(parameter)), prefix + name)
        if main:
            for name, buffer in current.named_buffers(recurse=False):
                if buffer is not None and name not in current._non_persistent_buffers_set:
                    state[prefix + name] = buffer.detach().cpu().clone()
        for name, child in current.named_children():
            if child is not None:
                visit(child, f"{prefix}{name}.")

    visit(module, "")
    return state


def load_full_state_dict(engine: Any, state_dict: Mapping[str, torch.Tensor], strict: bool = True) -> None:
    """Load whole weights into a ZeRO-3 engine's partitioned module, one module at a time."""
    deepspeed = sys.modules["deepspeed"]
    state_dict = dict(state_dict)
    missing: list[str] = []
    errors: list[str] = []

    def visit(current: torch.nn.Module, prefix: str) -> None:
        parameters = list(current.parameters(recurse=False))
        # every process loads the gathered values (buffers are not partitioned: each needs them)
        with deepspeed.zero.GatheredParameters(parameters, modifier_rank=0):
            current._load_from_state_dict(state_dict, prefix, {}, True, missing, [], errors)
        for name, child in current.named_children():
            if child is not None:
                visit(child, f"{prefix}{name}.")

    visit(engine.module, "")
    unexpected = sorted(set(state_dict) - set(engine.module.state_dict().keys()))
    if errors or (strict and (missing or unexpected)):
        problems = errors + [f"missing {missing}"] * bool(missing) + [f"unexpected {unexpected}"] * bool(unexpected)
        raise DrivetrainError("the weights do not fit the model: " + "; ".join(problems))


# ------------------------------------------------------------------ ZeRO-3 construction


@contextlib.contextmanager
def zero3_init(plugin: DeepSpeedPlugin) -> Iterator[None]:
    """``deepspeed.zero.Init`` with the plugin's ZeRO settings and the run's precision."""
    from drivetrain.plugin_api import PartialState

    state = PartialState()
    run = state.run
    deepspeed = import_deepspeed(run)
    ensure_process_group(run)
    zero = {key: value for key, value in (plugin.deepspeed_config.get("zero_optimization") or {}).items()
            if value != AUTO and not (isinstance(value, dict) and AUTO in value.values())}
    config: dict[str, Any] = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                              "zero_optimization": zero}
    for name in ("fp16", "bf16"):
        if isinstance(plugin.deepspeed_config.get(name), dict):
            config[name] = dict(plugin.deepspeed_config[name])
    fill_precision(config, run.selection.mixed_precision, plugin.config_origin)
    with deepspeed.zero.Init(config_dict_or_path=config):
        yield
