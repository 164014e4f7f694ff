"""The ``Accelerator``: Accelerate's facade, one class whose every public member is a few calls
to its collaborators and the run's plugins.

Every public member is defined here, as a ``def`` or as an assignment in ``__init__``, except
Accelerate's attributes of a backend, which the core does not name: plugins declare them and
they are installed on the class as descriptors (:mod:`drivetrain.runtime.backend_attributes`,
listed in ``docs/architecture.md``).

Collaborators, each with one job: :mod:`.init_arguments` (the constructor's general
arguments), :mod:`.backend_arguments` (its backend arguments), :mod:`.preparation` (what
``prepare`` does per object), :mod:`.training_step` (backward, accumulation, clipping,
unwrapping), :mod:`drivetrain.services.checkpointing.calls` (saving, loading and telling of
checkpoints, given the accelerator's :class:`~drivetrain.runtime.session.Session`),
:mod:`.uneven_inputs`, and the process state (:mod:`.state`) and collectives
(:mod:`.utils.operations`).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator, Sequence

import torch

from . import init_arguments, preparation, training_step, uneven_inputs
from ..selection.backend_arguments import BackendArgument, given_backend_arguments, strategy_for_options
from ..runtime.backend_attributes import backend_attribute_host
from ..kernel.contributed import surface_getattr
from ..kernel.errors import CheckpointError, ConfigError, DrivetrainError, UsageError  # noqa: F401  (UsageError: its old home)
from ..runtime.kwargs_handlers import (
    AutocastKwargs,
    DataLoaderConfiguration,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    KwargsHandler,
    ProfileKwargs,
    ProjectConfiguration,
    TorchDynamoPlugin,
)
from ..runtime.session import Session
from ..runtime.state import AcceleratorState, GradientState
from ..services import monitoring, preemption
from ..services.checkpointing import calls as checkpoint_calls
from ..services.checkpointing.full_state import full_state_dict
from ..services.other import unwrap_prepared_model
from ..services.other import remove_mixed_precision_forward  # noqa: F401  (its old home)


@backend_attribute_host("Accelerator")
class Accelerator:
    """Prepare a model, its optimizer, scheduler and data for the run this process is in.

    Arguments are Accelerate's, in Accelerate's order. A strategy plugin may accept more
    keyword arguments (those its ``StrategySpec.accelerator_arguments`` names). Accelerate's
    backend arguments (the parameters annotated ``BackendArgument``) are handed to the strategy
    that declares them, which giving one selects (:mod:`drivetrain.selection.backend_arguments`);
    one no installed strategy takes is a ``TypeError`` naming what is installed.

    Accelerate's attributes of a backend (``deepspeed_plugin``, ``fsdp_plugin``, ``is_fsdp2``,
    ``fp8_enabled``, ...) are declared by the plugins that own them and installed on this class
    (``Accelerator.is_fsdp2.declared_by``; :mod:`drivetrain.runtime.backend_attributes`).
    """

    def __init__(
        self,
        device_placement: bool = True,
        split_batches: bool = False,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int = 1,
        cpu: bool = False,
        dataloader_config: DataLoaderConfiguration | None = None,
        deepspeed_plugin: BackendArgument = None,
        fsdp_plugin: BackendArgument = None,
        torch_tp_plugin: BackendArgument = None,
        megatron_lm_plugin: BackendArgument = None,
        rng_types: Sequence[str] | None = None,
        log_with: Any = None,
        project_dir: str | os.PathLike | None = None,
        project_config: ProjectConfiguration | None = None,
        gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
        step_scheduler_with_optimizer: bool = True,
        kwargs_handlers: Sequence[KwargsHandler] | None = None,
        dynamo_backend: str | None = None,
        dynamo_plugin: TorchDynamoPlugin | None = None,
        deepspeed_plugins: BackendArgument = None,
        parallelism_config: BackendArgument = None,
        **strategy_options: Any,
    ) -> None:
        strategy_options.update(given_backend_arguments(Accelerator.__init__, locals()))
        handlers = init_arguments.file_handlers(kwargs_handlers or ())
        strategy = strategy_for_options(strategy_options)
        self.state = AcceleratorState(mixed_precision=mixed_precision, cpu=cpu, strategy=strategy,
                                      dynamo_plugin=dynamo_plugin, _from_accelerator=True,
                                      strategy_arguments=strategy_options,
                                      **init_arguments.state_arguments(handlers))
        self.run = self.state.run
        self.run.handler_kwargs.update(handlers)
        self.run.add_strategy_arguments(strategy_options)  # a further Accelerator on the same state brings its own

        project_configuration = project_config or ProjectConfiguration(project_dir=project_dir)
        if project_dir is not None and project_config is not None:
            project_configuration.set_directories(project_dir)
        self.device_placement = device_placement
        self.dataloader_config = dataloader_config or DataLoaderConfiguration(split_batches=split_batches)
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.rng_types = list(rng_types) if rng_types is not None else ["generator"]
        self.gradient_state = GradientState(init_arguments.accumulation_plugin(gradient_accumulation_steps,
                                                                                gradient_accumulation_plugin))
        # What the services read and change (what prepare() recorded, step, scaler, trackers):
        # they are given this, never the Accelerator; the run carries the newest one.
        self.session = Session(self.run, self.state, self.gradient_state, project_configuration)
        self.step = 0
        self.flag_tensor: torch.Tensor | None = None

        compile_with = init_arguments.dynamo_plugin(dynamo_backend, dynamo_plugin)
        if compile_with is not None:
            self.run.compile_options = self.state.dynamo_plugin = compile_with
            self.run.activate_feature("compile")
        scaler_kwargs = handlers.get("GradScalerKwargs", GradScalerKwargs()).to_kwargs()
        self.run.grad_scaler = self.run.strategy.make_grad_scaler(scaler_kwargs)
        self.scaler = self.run.grad_scaler

        # What prepare() recorded, by kind (checkpointing and the step read them): the session's record.
        self._prepared = self.session.prepared
        self.trackers = self._build_trackers(log_with)
        self._configure_run()
        # save_on_preemption: the signals caught and the processes' agreement on the step to stop at
        self.session.preemption = preemption.arm(self.session)
        # MonitorKwargs: the step monitor watching what prepare() returns (None: nothing watched)
        self.session.monitor = monitoring.start(self.session, handlers.get("MonitorKwargs"))

    _strategy_for_options = staticmethod(strategy_for_options)

    # The session's counters and objects, which the services change too (a load restores `step`).
    project_configuration = property(lambda self: self.session.project_configuration,
                                     lambda self, value: setattr(self.session, "project_configuration", value))
    step = property(lambda self: self.session.step, lambda self, value: setattr(self.session, "step", value))
    scaler = property(lambda self: self.session.scaler, lambda self, value: setattr(self.session, "scaler", value))
    trackers = property(lambda self: self.session.trackers,
                        lambda self, value: setattr(self.session, "trackers", value))
    _preemption = property(lambda self: self.session.preemption)
    _monitor = property(lambda self: self.session.monitor)

    # Accelerate's private names of the prepared lists, read by scripts and tests; the record is ``_prepared``.
    _models = property(lambda self: self._prepared.models)
    _optimizers = property(lambda self: self._prepared.optimizers)
    _schedulers = property(lambda self: self._prepared.schedulers)
    _dataloaders = property(lambda self: self._prepared.dataloaders)
    _custom_objects = property(lambda self: self._prepared.custom_objects)
    _save_model_state_pre_hook = property(lambda self: self._prepared.save_state_pre_hooks)
    _load_model_state_pre_hook = property(lambda self: self._prepared.load_state_pre_hooks)

    def _configure_run(self) -> None:
        """Let the active plugins configure the run for this accelerator (and add attributes)."""
        for extension in self.run.call("drivetrain_configure_run", accelerator=self):
            if extension is not None and all(extension is not known for known in self.run.extensions):
                self.run.extensions.append(extension)

    def _build_trackers(self, log_with: Any) -> Any:
        if not log_with:
            return []
        from ..services.tracking import Trackers

        return Trackers(log_with, logging_dir=self.logging_dir, is_main_process=self.is_main_process, run=self.run)

    # ------------------------------------------- Accelerate's attributes of a backend

    def _backend_run(self, name: str) -> Any:
        if "run" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self.run

    def _backend_arguments(self) -> dict[str, Any]:
        return self.state._backend_arguments()

    def __getstate__(self) -> dict[str, Any]:
        # The run (plugin manager, environment, process group) is the process's: it is not
        # pickled, and an unpickled Accelerator takes the run of the process that loads it.
        state = dict(self.__dict__)
        state.pop("run", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.run = self.state.run

    def _extension_or(self, name: str, default: Any) -> Any:
        """What the run's extensions answer for ``name`` (a strategy's device mesh), else ``default``."""
        try:
            return self.run.extension_attribute(name)
        except AttributeError:
            return default

    # ---------------------------------------------------------- the process

    @property
    def device(self) -> torch.device:
        return self.state.device

    @property
    def distributed_type(self):
        return self.state.distributed_type

    @property
    def num_processes(self) -> int:
        return self.state.num_processes

    @property
    def process_index(self) -> int:
        return self.state.process_index

    @property
    def local_process_index(self) -> int:
        return self.state.local_process_index

    @property
    def is_main_process(self) -> bool:
        return self.state.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        return self.state.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        return self.state.is_last_process

    @property
    def use_distributed(self) -> bool:
        return self.state.use_distributed

    @property
    def mixed_precision(self) -> str:
        return self.state.mixed_precision

    @property
    def native_amp(self) -> bool:
        """Whether torch's own mixed precision (fp16/bf16 autocast) is in use."""
        return str(self.state.mixed_precision) in ("fp16", "bf16")

    @property
    def multi_device(self) -> bool:
        """Several processes on accelerator devices (not CPU processes)."""
        distributed = self.state.distributed_type.value
        return distributed.startswith("MULTI_") and distributed != "MULTI_CPU"

    # ------------------------------------------------- composable parallelism
    # A strategy that lays processes out on a device mesh answers these through its run
    # extension; otherwise each process is its own data shard.

    @property
    def parallelism_config(self) -> Any:
        return self._extension_or("parallelism_config", None)

    @property
    def torch_device_mesh(self) -> Any:
        return self._extension_or("torch_device_mesh", None)

    @property
    def is_composable_parallelism_enabled(self) -> bool:
        return bool(self._extension_or("is_composable_parallelism_enabled", False))

    @property
    def data_parallel_rank(self) -> int:
        return self.run.data_parallel_rank

    @property
    def data_parallel_shard_rank(self) -> int:
        return self._extension_or("data_parallel_shard_rank", 0)

    @property
    def tensor_parallel_rank(self) -> int:
        return self._extension_or("tensor_parallel_rank", 0)

    @property
    def context_parallel_rank(self) -> int:
        return self._extension_or("context_parallel_rank", 0)

    @property
    def pipeline_parallel_rank(self) -> int:
        return self._extension_or("pipeline_parallel_rank", 0)

    def maybe_context_parallel(self, buffers: list[Any] | None = None, buffer_seq_dims: list[int] | None = None,
                               no_restore_buffers: set[Any] | None = None) -> contextlib.AbstractContextManager:
        """Split ``buffers`` over the context-parallel processes inside the block (a no-op
        when the run has no such dimension)."""
        enter = self._extension_or("maybe_context_parallel", None)
        if enter is None:
            return contextlib.nullcontext()
        return enter(buffers=buffers, buffer_seq_dims=buffer_seq_dims, no_restore_buffers=no_restore_buffers)

    # ------------------------------------------------ the options it was built with

    @property
    def project_dir(self) -> str | None:
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        return self.project_configuration.logging_dir

    @property
    def save_iteration(self) -> int:
        return self.project_configuration.iteration

    @property
    def split_batches(self) -> bool:
        return self.dataloader_config.split_batches

    @property
    def dispatch_batches(self) -> bool | None:
        return self.dataloader_config.dispatch_batches

    @property
    def even_batches(self) -> bool:
        return self.dataloader_config.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self.dataloader_config.even_batches = value

    @property
    def use_seedable_sampler(self) -> bool:
        return self.dataloader_config.use_seedable_sampler

    @property
    def non_blocking(self) -> bool:
        return self.dataloader_config.non_blocking

    @property
    def use_stateful_dataloader(self) -> bool:
        return self.dataloader_config.use_stateful_dataloader

    @property
    def gradient_accumulation_steps(self) -> int:
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        self.gradient_state.plugin_kwargs.update({"num_steps": steps})

    @property
    def sync_gradients(self) -> bool:
        return self.gradient_state.sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, value: bool) -> None:
        self.gradient_state.sync_gradients = value

    @property
    def optimizer_step_was_skipped(self) -> bool:
        return any(getattr(opt, "step_was_skipped", False) for opt in self._prepared.optimizers)

    # The kwargs handlers given in `kwargs_handlers` (`None` for a class not given).

    @property
    def autocast_handler(self) -> Any:
        return self.run.handler_kwargs.get("AutocastKwargs")

    @property
    def ddp_handler(self) -> Any:
        return self.run.handler_kwargs.get("DistributedDataParallelKwargs")

    @property
    def init_handler(self) -> Any:
        return self.run.handler_kwargs.get("InitProcessGroupKwargs")

    @property
    def scaler_handler(self) -> Any:
        return self.run.handler_kwargs.get("GradScalerKwargs")

    @property
    def profile_handler(self) -> Any:
        return self.run.handler_kwargs.get("ProfileKwargs")

    @property
    def log_with(self) -> list[Any]:
        """The trackers selected: their names, and the tracker objects given."""
        choices = getattr(self.trackers, "_choices", [])  # no trackers: an empty list
        return [choice.name if hasattr(choice, "spec") else choice for choice in choices]

    @property
    def should_save_model(self) -> bool:
        """Whether this process writes model files; a strategy that shards the model over some
        process-mesh dimensions and replicates it over others answers for itself."""
        return bool(self._extension_or("should_save_model", True))

    # ---------------------------------------------------------------- prepare

    def prepare(self, *args: Any, device_placement: Sequence[bool] | None = None) -> Any:
        """Prepare models, optimizers, schedulers and data loaders, in any order.

        Returns them in the order given (a single object when one was given).
        """
        return preparation.prepare(self, args, device_placement)

    def prepare_model(self, model: torch.nn.Module, device_placement: bool | None = None,
                      evaluation_mode: bool = False) -> torch.nn.Module:
        """Place, convert, wrap and finalise a model through the active plugins."""
        return preparation.prepare_model(self, model, device_placement, evaluation_mode)

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None) -> Any:
        return preparation.prepare_optimizer(self, optimizer, device_placement)

    def prepare_scheduler(self, scheduler: Any) -> Any:
        return preparation.prepare_scheduler(self, scheduler)

    def prepare_data_loader(self, data_loader: Any, device_placement: bool | None = None,
                            slice_fn_for_dispatch: Callable | None = None) -> Any:
        return preparation.prepare_data_loader(self, data_loader, device_placement, slice_fn_for_dispatch)

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        from ..services.data_loader import skip_first_batches

        skipping = skip_first_batches(dataloader, num_batches=num_batches)
        return skipping if self._monitor is None else self._monitor.watch(skipping)

    # ------------------------------------------------------------ the step

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backward for ``loss``, divided for gradient accumulation, through the active plugins."""
        training_step.backward(self, loss, kwargs)
        if self._monitor is not None:
            self._monitor.saw_loss(loss)
        if self._preemption is not None:
            self._preemption.stepped, self._preemption.saved = True, False

    @contextlib.contextmanager
    def no_sync(self, model: torch.nn.Module) -> Iterator[None]:
        """Run backward without synchronising gradients across processes."""
        with self.run.strategy.no_sync(model):
            yield

    @contextlib.contextmanager
    def accumulate(self, *models: torch.nn.Module) -> Iterator[None]:
        """One micro-batch of gradient accumulation: gradients synchronise at the window's end."""
        with training_step.accumulate(self, models):
            yield

    @contextlib.contextmanager
    def trigger_sync_in_backward(self, model: torch.nn.Module) -> Iterator[None]:
        """Synchronise in the next backward even inside ``no_sync``."""
        with self.run.strategy.sync_in_backward(model):
            yield

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Divide fp16 gradients by the loss scale (once per step), before clipping."""
        training_step.unscale_gradients(self, optimizer)

    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = 2) -> torch.Tensor | None:
        """Clip the gradient norm (after unscaling); returns the total norm.

        ``None`` when the strategy clips inside its own step and measured no norm there.
        """
        return training_step.clip_grad_norm(self, parameters, max_norm, norm_type)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        """Clip each gradient to ``[-clip_value, clip_value]`` (after unscaling).

        A strategy that cannot (its engine steps inside ``backward``, or its gradients are
        sharded) raises before anything changes; use :meth:`clip_grad_norm_` there.
        """
        training_step.clip_grad_value(self, parameters, clip_value)

    @property
    def has_lomo_optimizer(self) -> bool:
        """Whether a prepared optimizer is a LOMO one (its step happens inside backward)."""
        return bool(training_step.lomo_optimizers(self._prepared.optimizers))

    def lomo_backward(self, loss: Any, learning_rate: float) -> None:
        """Backward and update in one pass, through each prepared LOMO optimizer's ``fused_backward``."""
        training_step.lomo_backward(self._prepared.optimizers, loss, learning_rate)

    @contextlib.contextmanager
    def autocast(self, autocast_handler: AutocastKwargs | None = None) -> Iterator[None]:
        """Run the block in the run's mixed precision."""
        handler = autocast_handler or self.run.handler_kwargs.get("AutocastKwargs") or AutocastKwargs()
        with self.run.precision.autocast(handler.to_kwargs()):
            yield

    def unwrap_model(self, model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                     keep_torch_compile: bool = True) -> torch.nn.Module:
        """The user's module from inside a prepared one."""
        return unwrap_prepared_model(self.run, model, keep_fp32_wrapper, keep_torch_compile)

    # --------------------------------------------- process control and collectives

    def wait_for_everyone(self) -> None:
        """Barrier; also waits until the last ``save_state`` checkpoint is on disk, raising if it failed."""
        checkpoint_calls.wait_for_everyone(self.session)

    def print(self, *args: Any, **kwargs: Any) -> None:
        self.state.print(*args, **kwargs)

    def main_process_first(self):
        return self.state.main_process_first()

    def local_main_process_first(self):
        return self.state.local_main_process_first()

    def split_between_processes(self, inputs: Any, apply_padding: bool = False):
        return self.state.split_between_processes(inputs, apply_padding=apply_padding)

    def on_main_process(self, function: Callable | None = None) -> Callable:
        return self.state.on_main_process(function)

    def on_local_main_process(self, function: Callable | None = None) -> Callable:
        return self.state.on_local_main_process(function)

    def on_last_process(self, function: Callable | None = None) -> Callable:
        return self.state.on_last_process(function)

    def on_process(self, function: Callable | None = None, process_index: int | None = None) -> Callable:
        return self.state.on_process(function, process_index=process_index)

    def on_local_process(self, function: Callable | None = None, local_process_index: int | None = None) -> Callable:
        return self.state.on_local_process(function, local_process_index=local_process_index)

    def gather(self, tensor: Any) -> Any:
        from ..services.cross_process import gather

        return gather(tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        from ..services.cross_process import gather_for_metrics

        return gather_for_metrics(input_data, use_gather_object=use_gather_object)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        from ..services.cross_process import reduce

        return reduce(tensor, reduction=reduction, scale=scale)

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
        from ..services.cross_process import pad_across_processes

        return pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)

    def set_trigger(self) -> None:
        """Raise a flag on this process that :meth:`check_trigger` sees on every process."""
        self.flag_tensor = torch.tensor(1, device=self.device)

    def check_trigger(self) -> bool:
        """Whether any process called :meth:`set_trigger` since the last check (collective)."""
        flag = self.flag_tensor if self.flag_tensor is not None else torch.tensor(0, device=self.device)
        if int(self.state.collectives.all_reduce(flag.clone(), "sum").item()) < 1:
            return False
        self.flag_tensor = torch.tensor(0, device=self.device)
        return True

    @contextlib.contextmanager
    def join_uneven_inputs(self, joinables: Sequence[Any], even_batches: bool | None = None) -> Iterator[None]:
        """Let processes with fewer batches shadow the collectives of the others (torch's Join)."""
        with uneven_inputs.join_uneven_inputs(self, joinables, even_batches):
            yield

    # ---------------------------------------------------------- checkpoints

    def save(self, obj: Any, f: str | os.PathLike, safe_serialization: bool = False) -> None:
        """Save ``obj`` on the main process (on each node's main one with ``save_on_each_node``)."""
        checkpoint_calls.save(self.session, obj, f, safe_serialization)

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Save and load these objects (anything with ``state_dict``/``load_state_dict``) with the state."""
        # Numbered as Accelerate numbers them, so that a caller's filter on its words still matches.
        invalid = [f"Item at index {index} ({type(o).__name__})" for index, o in enumerate(objects)
                   if not (hasattr(o, "state_dict") and hasattr(o, "load_state_dict"))]
        if invalid:
            raise ConfigError(f"cannot checkpoint {', '.join(invalid)}: a registered object needs state_dict() and "
                              "load_state_dict(); register only objects that define both (wrap other values in a class that does)")
        self._prepared.custom_objects.extend(objects)

    def save_state(self, output_dir: str | os.PathLike | None = None, safe_serialization: bool = True, *,
                   blocking: bool = True, **save_model_func_kwargs: Any) -> str:
        """Save everything needed to resume exactly; returns the checkpoint directory.

        When it returns the checkpoint is in place and older ones are rotated away (automatic
        naming keeps ``total_limit``). It appears only when complete and synced on every
        process; a crash leaves the previous one intact. ``DRIVETRAIN_CHECKPOINT_BACKGROUND=1``
        lets syncing and renaming overlap training instead. ``blocking=False`` returns as soon
        as the state is copied to host memory and writes, hashes, syncs and commits it in the
        background. Either way, :meth:`wait_for_checkpoint`, ``load_state``, the next
        ``save_state``, ``wait_for_everyone``, ``end_training`` and the process's exit wait for it.
        """
        return checkpoint_calls.save_state(self.session, output_dir, safe_serialization, save_model_func_kwargs,
                                           blocking)

    def wait_for_checkpoint(self) -> None:
        """Wait until the last ``save_state`` checkpoint is in place on every process; raise
        a ``CheckpointError`` on every process if it failed (the previous one is then intact)."""
        checkpoint_calls.wait_for_checkpoint(self.session)

    def load_state(self, input_dir: str | os.PathLike | None = None, load_kwargs: dict[str, Any] | None = None,
                   **load_model_func_kwargs: Any) -> str:
        """Restore a checkpoint written by :meth:`save_state` (the newest one when none is named).

        ``load_model_func_kwargs`` go to the model's load function (``strict``, ``assign``;
        a strategy's engine takes its own); ``map_location`` (here or in ``load_kwargs``)
        places the tensors of registered objects. Every file is verified against its
        checksum and every state checked against its object before anything changes.
        """
        return checkpoint_calls.load_state(self.session, input_dir, load_kwargs, load_model_func_kwargs)

    def register_save_state_pre_hook(self, hook: Callable[..., None]) -> Any:
        """Call ``hook(models, weights, output_dir)`` before saving; ``handle.remove()`` undoes it."""
        return checkpoint_calls.register_pre_hook(self._prepared.save_state_pre_hooks, hook)

    def register_load_state_pre_hook(self, hook: Callable[..., None]) -> Any:
        """Call ``hook(models, input_dir)`` before loading; ``handle.remove()`` undoes it."""
        return checkpoint_calls.register_pre_hook(self._prepared.load_state_pre_hooks, hook)

    def get_state_dict(self, model: torch.nn.Module, unwrap: bool = True) -> dict[str, Any]:
        """The full state dict of a prepared model (gathered where the strategy shards it)."""
        return full_state_dict(self.session, model, unwrap)

    def save_model(self, model: torch.nn.Module, save_directory: str | os.PathLike, max_shard_size: int | str = "10GB",
                   safe_serialization: bool = True) -> None:
        """Write the model's full weights (sharded above ``max_shard_size``) on the main process."""
        checkpoint_calls.save_model(self.session, model, save_directory, max_shard_size, safe_serialization)

    # ------------------------------------------------------------ memory and profiling

    def free_memory(self, *objects: Any) -> list[None]:
        """Forget every prepared object and free device memory."""
        from ..services.memory import release_memory

        self._prepared.forget_prepared()
        if self._monitor is not None:
            self._monitor.forget_prepared()
        self.step = 0
        return release_memory(*objects)

    clear = free_memory

    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Iterator[Any]:
        """Profile the block with ``torch.profiler``; writes a trace when asked."""
        from ..runtime.profiling import build_profiler, export_trace

        handler = profile_handler or self.run.handler_kwargs.get("ProfileKwargs") or ProfileKwargs()
        with build_profiler(handler, self.run.platform.device_type) as profiler:
            yield profiler
        export_trace(profiler, handler, self.process_index)

    def verify_device_map(self, model: torch.nn.Module) -> bool:
        """Whether the model was dispatched across devices by a device map (big-model inference)."""
        return any(getattr(m, "hf_device_map", None) and len(m.hf_device_map) > 1 for m in model.modules())

    # ------------------------------------------------------------ trackers

    def init_trackers(self, project_name: str, config: dict | None = None, init_kwargs: dict | None = None) -> None:
        if self.trackers:
            self.trackers.init_trackers(project_name, config=config, init_kwargs=init_kwargs or {})

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        if self.trackers:
            return self.trackers.get_tracker(name, unwrap=unwrap)
        from ..services.tracking import GeneralTracker

        return GeneralTracker(_blank=True)

    def log(self, values: dict[str, Any], step: int | None = None, log_kwargs: dict | None = None) -> None:
        checkpoint_calls.log(self.session, values, step, log_kwargs)

    def end_training(self) -> None:
        """Wait for the last checkpoint (trackers hear of it), log the step monitor's last
        figures and summary (``MonitorKwargs``), then end the trackers."""
        try:
            self.wait_for_everyone()
            if self._monitor is not None:
                self._monitor.finish()
        finally:
            if self.trackers:
                self.trackers.end_training()

    def __repr__(self) -> str:
        return f"Accelerator(device={self.device}, processes={self.num_processes}, mixed_precision={self.mixed_precision})"


# Accelerate's accelerator module holds the ``utils`` availability probes in its namespace
# (``is_xpu_available``, ``is_bitsandbytes_multi_backend_available``), where scripts and tests
# patch them; here they are the names plugins contribute to ``drivetrain.accelerator`` or,
# failing that, to ``drivetrain.utils``.
__getattr__ = surface_getattr("drivetrain.accelerator", also=("utils",))
