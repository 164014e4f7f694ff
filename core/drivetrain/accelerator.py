"""The ``Accelerator``: Accelerate's facade, each method a few calls to the active plugins."""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import pathlib
import weakref
from typing import Any, Callable, Iterator, Sequence

import torch

from .kernel import environment
from .accelerator_members import AccelerateMembers
from .accelerator_processes import AcceleratorProcesses
from .accelerator_properties import AcceleratorProperties
from .accelerator_slots import positional_options
from .kernel.errors import CheckpointError, ConfigError, DrivetrainError, UsageError  # noqa: F401  (UsageError: its old home)
from .kwargs_handlers import (
    AutocastKwargs,
    DataLoaderConfiguration,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
    ProfileKwargs,
    ProjectConfiguration,
    TorchDynamoPlugin,
)
from .optimizer import AcceleratedOptimizer
from .scheduler import AcceleratedScheduler
from .selection import strategy_option_attributes as _strategy_option_attributes
from .utils.other import remove_mixed_precision_forward
from .state import AcceleratorState, GradientState

logger = logging.getLogger(__name__)


def _is_dataloader(obj: Any) -> bool:
    return isinstance(obj, torch.utils.data.DataLoader)


def _is_scheduler(obj: Any) -> bool:
    return isinstance(obj, torch.optim.lr_scheduler.LRScheduler) or (
        hasattr(obj, "step") and hasattr(obj, "optimizer") and hasattr(obj, "get_last_lr")
    )


class Accelerator(AcceleratorProperties, AcceleratorProcesses, AccelerateMembers):
    """Prepare a model, its optimizer, scheduler and data for the run this process is in.

    Arguments are Accelerate's, in Accelerate's order. A strategy plugin may accept more
    keyword arguments (those its ``StrategySpec.accelerator_arguments`` names, such as
    ``fsdp_plugin``); giving one selects that strategy. The ``_strategy_slot_N`` parameters
    hold the places of Accelerate's backend arguments (``deepspeed_plugin`` to
    ``megatron_lm_plugin`` after ``dataloader_config``, ``deepspeed_plugins`` and
    ``parallelism_config`` at the end), so a positional call lands every argument where
    Accelerate puts it; pass those by their Accelerate names (see ``accelerator_slots``).
    """

    def __init__(
        self,
        device_placement: bool = True,
        split_batches: bool = False,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int = 1,
        cpu: bool = False,
        dataloader_config: DataLoaderConfiguration | None = None,
        _strategy_slot_1: Any = None,
        _strategy_slot_2: Any = None,
        _strategy_slot_3: Any = None,
        _strategy_slot_4: Any = None,
        rng_types: Sequence[str] | None = None,
        log_with: Any = None,
        project_dir: str | os.PathLike | None = None,
        project_config: ProjectConfiguration | None = None,
        gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
        step_scheduler_with_optimizer: bool = True,
        kwargs_handlers: Sequence[KwargsHandler] | None = None,
        dynamo_backend: str | None = None,
        dynamo_plugin: TorchDynamoPlugin | None = None,
        _strategy_slot_5: Any = None,
        _strategy_slot_6: Any = None,
        **strategy_options: Any,
    ) -> None:
        strategy_options.update(positional_options(
            (_strategy_slot_1, _strategy_slot_2, _strategy_slot_3, _strategy_slot_4, _strategy_slot_5,
             _strategy_slot_6), strategy_options))
        handlers = self._file_handlers(kwargs_handlers or ())
        strategy = self._strategy_for_options(strategy_options)
        init_kwargs = handlers.get("InitProcessGroupKwargs", InitProcessGroupKwargs()).to_kwargs()
        # A precision plugin's recipe handler names the backend it configures (`precision_backend`).
        backends = {h.precision_backend for h in handlers.values() if getattr(h, "precision_backend", None)}
        if len(backends) > 1:
            raise ConfigError(f"kwargs_handlers configure several precision backends ({sorted(backends)}); pass one")
        if backends:
            init_kwargs["precision_backend"] = backends.pop()
        self.state = AcceleratorState(mixed_precision=mixed_precision, cpu=cpu, strategy=strategy,
                                      dynamo_plugin=dynamo_plugin, _from_accelerator=True, **init_kwargs)
        self.run = self.state.run
        self.state._accelerator = weakref.ref(self)  # the state's newest Accelerator (checkpointing's functions)
        self.run.handler_kwargs.update(handlers)
        self.run.options.update(strategy_options)

        self.project_configuration = project_config or ProjectConfiguration(project_dir=project_dir)
        if project_dir is not None and project_config is not None:
            self.project_configuration.set_directories(project_dir)
        self.device_placement = device_placement
        self.dataloader_config = dataloader_config or DataLoaderConfiguration(split_batches=split_batches)
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.rng_types = list(rng_types) if rng_types is not None else ["generator"]
        self.gradient_state = GradientState(self._accumulation_plugin(gradient_accumulation_steps,
                                                                       gradient_accumulation_plugin))
        self.step = 0
        self.flag_tensor: torch.Tensor | None = None

        self._setup_dynamo(dynamo_backend, dynamo_plugin)
        scaler_kwargs = handlers.get("GradScalerKwargs", GradScalerKwargs()).to_kwargs()
        # `False` from a strategy whose engine scales the loss itself means: no scaler at all
        self.run.grad_scaler = self.run.call("drivetrain_make_grad_scaler", kwargs=scaler_kwargs) or None
        self.scaler = self.run.grad_scaler

        self._models: list[Any] = []
        self._optimizers: list[Any] = []
        self._schedulers: list[Any] = []
        self._dataloaders: list[Any] = []
        self._custom_objects: list[Any] = []
        # Checkpoints the commit thread put in place, told to plugins and trackers on this thread.
        self._published_checkpoints: collections.deque[str] = collections.deque()
        # OrderedDict: torch's RemovableHandle keeps a weak reference to it
        self._save_model_state_pre_hook: dict[int, Callable] = collections.OrderedDict()
        self._load_model_state_pre_hook: dict[int, Callable] = collections.OrderedDict()
        self.trackers = self._build_trackers(log_with)
        self._configure_run()

    # ------------------------------------------------------------ set-up helpers

    @staticmethod
    def _file_handlers(kwargs_handlers: Sequence[KwargsHandler]) -> dict[str, KwargsHandler]:
        filed: dict[str, KwargsHandler] = {}
        for handler in kwargs_handlers:
            name = type(handler).__name__
            if not isinstance(handler, KwargsHandler):
                raise ConfigError(f"kwargs_handlers takes KwargsHandler objects, not {name}")
            if name in filed:
                raise ConfigError(f"kwargs_handlers has two {name}; pass one")
            filed[name] = handler
        return filed

    @staticmethod
    def _strategy_for_options(options: dict[str, Any]) -> str | None:
        """The strategy whose ``accelerator_arguments`` the given keywords are.

        A keyword no installed strategy declares is accepted when its value is ``None`` (a
        script written for Accelerate passing ``..._plugin=None``) and refused otherwise.
        """
        given = {arg: value for arg, value in options.items() if value is not None}
        if not given:
            return None
        from .kernel.plugin_manager import get_plugin_manager

        owners = {arg: spec.name for _p, spec in get_plugin_manager().registrations("drivetrain_register_strategies")
                  for arg in spec.accelerator_arguments}
        unknown = sorted(set(given) - set(owners))
        if unknown:
            raise TypeError(f"Accelerator() got unexpected keyword argument(s) {unknown}: no installed strategy "
                            f"accepts them (strategies accept: {sorted(owners) or 'none'}); install the plugin "
                            "that provides it, see `drivetrain plugins list`")
        chosen = {owners[arg] for arg in given}
        from .selection import requests_from_env

        requested = requests_from_env(get_plugin_manager()).strategy
        if requested and requested not in chosen and any(
                spec.name == requested and set(given) <= set(spec.composes_arguments)
                for _p, spec in get_plugin_manager().registrations("drivetrain_register_strategies")):
            # the launcher's strategy composes these options (a layout Accelerate's guide passes in
            # code while the config file names the strategy): it stays the run's
            return requested
        if len(chosen) > 1:
            # one strategy may compose with another's options (a mesh that shards with FSDP)
            composing = [spec.name for _p, spec in get_plugin_manager().registrations("drivetrain_register_strategies")
                         if spec.name in chosen and set(given) <= {*spec.accelerator_arguments,
                                                                    *spec.composes_arguments}]
            if len(composing) != 1:
                raise ConfigError(f"options for several strategies were given ({sorted(chosen)}); choose one")
            return composing[0]
        return chosen.pop()

    @staticmethod
    def _accumulation_plugin(steps: int, plugin: GradientAccumulationPlugin | None) -> GradientAccumulationPlugin:
        if plugin is not None:
            if steps != 1:
                raise ConfigError("pass gradient_accumulation_steps or gradient_accumulation_plugin, not both")
            return plugin
        if steps == 1:
            steps = environment.read_checked("GRADIENT_ACCUMULATION_STEPS", default=1)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError(f"gradient_accumulation_steps must be a whole number of at least 1, not {steps!r}")
        return GradientAccumulationPlugin(num_steps=steps)

    def _setup_dynamo(self, backend: str | None, plugin: TorchDynamoPlugin | None) -> None:
        if plugin is None:
            backend = backend or environment.read("DYNAMO_BACKEND")
            plugin = TorchDynamoPlugin(backend=backend) if backend else None
        if plugin is not None and plugin.backend not in ("no", "none"):
            self.run.options["dynamo_plugin"] = plugin
            self.state.dynamo_plugin = plugin
            self.run.activate_feature("compile")

    def _configure_run(self) -> None:
        """Let the active plugins configure the run for this accelerator (and add attributes)."""
        for extension in self.run.call("drivetrain_configure_run", accelerator=self):
            if extension is not None and all(extension is not known for known in self.run.extensions):
                self.run.extensions.append(extension)

    def __getattr__(self, name: str) -> Any:
        # Attributes a plugin adds (Accelerate's `accelerator.deepspeed_plugin`), through the run.
        run = self.__dict__.get("run")
        if run is None or name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        try:
            return run.extension_attribute(name)
        except AttributeError:
            pass
        if name in _strategy_option_attributes():
            return getattr(self.state, name)  # a backend's option object: None when that backend is unused
        from .kernel.contributed import resolve_module_name

        try:  # what Accelerate's attribute of a backend reads while it is unused (`is_fsdp2`: False)
            return resolve_module_name("accelerator.Accelerator", name)
        except AttributeError:
            pass
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _build_trackers(self, log_with: Any) -> Any:
        if not log_with:
            return []
        from .tracking import Trackers

        return Trackers(log_with, logging_dir=self.logging_dir, is_main_process=self.is_main_process, run=self.run)

    # ---------------------------------------------------------------- prepare

    def prepare(self, *args: Any, device_placement: Sequence[bool] | None = None) -> Any:
        """Prepare models, optimizers, schedulers and data loaders, in any order.

        Returns them in the order given (a single object when one was given).
        """
        if device_placement is None:
            device_placement = [None] * len(args)
        elif len(device_placement) != len(args):
            raise ConfigError(f"device_placement has {len(device_placement)} entries for {len(args)} objects")
        placement = [self.device_placement if p is None else p for p in device_placement]
        # Data loaders first: a strategy preparing the rest together may need their batch size.
        objects = [self._prepare_if_dataloader(obj, placement[index]) for index, obj in enumerate(args)]
        transformed = self.run.chain("drivetrain_transform_objects", "objects", objects, accelerator=self)
        if len(transformed) != len(objects):
            raise DrivetrainError(f"a plugin transformed the {len(objects)} objects of prepare into {len(transformed)}")
        objects = list(transformed)
        converted: list[int] = []
        prepared = None
        if self.run.hook("drivetrain_prepare_objects").get_hookimpls():
            # A strategy may wrap this call's models together with their optimizers (an engine):
            # it places and wraps them, but every model still goes through the conversions
            # before and the finalisation (compilation) after, as with any other strategy.
            converted = [index for index, obj in enumerate(objects) if self._is_new_model(obj)]
            for index in converted:
                objects[index] = self.run.chain("drivetrain_convert_model", "model", objects[index])
            prepared = self.run.call("drivetrain_prepare_objects", objects=objects, device_placement=placement,
                                     accelerator=self)
        if prepared is None:
            prepared = self._prepare_one_by_one(objects, placement, converted)
        else:
            prepared = list(prepared)
            if len(prepared) != len(objects):
                raise DrivetrainError(f"the strategy prepared {len(prepared)} objects for the {len(objects)} given")
            for index in converted:
                if isinstance(prepared[index], torch.nn.Module):
                    prepared[index] = self.run.chain("drivetrain_finalize_model", "model", prepared[index])
            self._record_prepared(objects, prepared)
        return prepared[0] if len(prepared) == 1 else tuple(prepared)

    def _is_new_model(self, obj: Any) -> bool:
        return isinstance(obj, torch.nn.Module) and all(obj is not known for known in self._models)

    def _record_prepared(self, objects: list[Any], prepared: list[Any]) -> None:
        """Keep what a strategy's ``drivetrain_prepare_objects`` returned, by kind."""
        for obj in prepared:
            if isinstance(obj, torch.nn.Module):
                if all(obj is not known for known in self._models):
                    self._models.append(obj)
            elif isinstance(obj, torch.optim.Optimizer):
                if all(obj is not known for known in self._optimizers):
                    self._optimizers.append(obj)
            elif _is_scheduler(obj) and not _is_dataloader(obj):
                if all(obj is not known for known in self._schedulers):
                    self._schedulers.append(obj)

    def _prepare_one_by_one(self, objects: list[Any], placement: list[bool], converted: list[int]) -> list[Any]:
        result: list[Any] = list(objects)
        # Models first, then optimizers (they refer to model parameters), then schedulers.
        for index, obj in enumerate(result):
            if self._is_new_model(obj):
                result[index] = self._prepare_model(obj, placement[index], converted=index in converted)
        for stage in (self._prepare_if_dataloader, self._prepare_if_optimizer, self._prepare_if_scheduler):
            for index, obj in enumerate(result):
                result[index] = stage(obj, placement[index])
        return result

    def _prepare_if_dataloader(self, obj: Any, placement: bool) -> Any:
        if _is_dataloader(obj) and obj not in self._dataloaders:
            return self.prepare_data_loader(obj, device_placement=placement)
        return obj

    def _prepare_if_optimizer(self, obj: Any, placement: bool) -> Any:
        if isinstance(obj, torch.optim.Optimizer) and not isinstance(obj, AcceleratedOptimizer):
            return self.prepare_optimizer(obj, device_placement=placement)
        return obj

    def _prepare_if_scheduler(self, obj: Any, placement: bool) -> Any:
        if _is_scheduler(obj) and not isinstance(obj, AcceleratedScheduler):
            return self.prepare_scheduler(obj)
        return obj

    def prepare_model(self, model: torch.nn.Module, device_placement: bool | None = None,
                      evaluation_mode: bool = False) -> torch.nn.Module:
        """Place, convert, wrap and finalise a model through the active plugins."""
        return self._prepare_model(model, device_placement, evaluation_mode)

    def _prepare_model(self, model: torch.nn.Module, device_placement: bool | None = None,
                       evaluation_mode: bool = False, converted: bool = False) -> torch.nn.Module:
        if device_placement is None:
            device_placement = self.device_placement
        strategy = self.run.selection.strategy
        if device_placement and not (strategy is not None and strategy.places_models):
            model = model.to(self.device)
        if not converted:
            model = self.run.chain("drivetrain_convert_model", "model", model)
        wrapped = self.run.call("drivetrain_wrap_model", model=model, evaluation_mode=evaluation_mode)
        model = self.run.chain("drivetrain_finalize_model", "model", model if wrapped is None else wrapped)
        self._models.append(model)
        return model

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None) -> Any:
        if device_placement is None:
            device_placement = self.device_placement
        wrapped = self.run.call("drivetrain_wrap_optimizer", optimizer=optimizer)
        if wrapped is None:
            wrapped = AcceleratedOptimizer(optimizer, device_placement=device_placement, scaler=self.scaler,
                                           device=self.device)
        self._optimizers.append(wrapped)
        return wrapped

    def prepare_scheduler(self, scheduler: Any) -> Any:
        optimizers = [opt for opt in self._optimizers if getattr(opt, "optimizer", opt) is scheduler.optimizer] \
            or self._optimizers
        wrapped = self.run.call("drivetrain_wrap_scheduler", scheduler=scheduler, optimizers=optimizers)
        if wrapped is None:
            wrapped = AcceleratedScheduler(scheduler, optimizers, step_with_optimizer=self.step_scheduler_with_optimizer,
                                           split_batches=self.split_batches)
        self._schedulers.append(wrapped)
        return wrapped

    def prepare_data_loader(self, data_loader: Any, device_placement: bool | None = None,
                            slice_fn_for_dispatch: Callable | None = None) -> Any:
        from .data_loader import prepare_data_loader

        if device_placement is None:
            device_placement = self.device_placement
        config = self.dataloader_config
        dispatch_batches = config.dispatch_batches
        if self.run.data_parallel_size != self.num_processes:
            # Peers that share a batch (tensor/context parallel) read the same shard; the main
            # process's dispatching cuts batches by process index instead.
            if dispatch_batches:
                raise ConfigError("dispatch_batches cannot be used when processes share batches (tensor or context "
                                  "parallelism); set DataLoaderConfiguration(dispatch_batches=False)")
            dispatch_batches = False
        prepared = prepare_data_loader(
            data_loader, self.device, num_processes=self.run.data_parallel_size,
            process_index=self.run.data_parallel_rank, split_batches=config.split_batches,
            put_on_device=device_placement, rng_types=list(self.rng_types),
            dispatch_batches=dispatch_batches, even_batches=config.even_batches,
            slice_fn_for_dispatch=slice_fn_for_dispatch, use_seedable_sampler=config.use_seedable_sampler,
            data_seed=config.data_seed, non_blocking=config.non_blocking,
            use_stateful_dataloader=config.use_stateful_dataloader,
        )
        prepared = self.run.chain("drivetrain_wrap_dataloader", "dataloader", prepared)
        self._dataloaders.append(prepared)
        return prepared

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        from .data_loader import skip_first_batches

        return skip_first_batches(dataloader, num_batches=num_batches)

    # ------------------------------------------------------------ the step

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backward for ``loss``, divided for gradient accumulation, through the active plugins."""
        if self.gradient_accumulation_steps > 1 and not self.run.options.get("strategy_accumulates", False):
            loss = loss / self.gradient_accumulation_steps
        if not self.run.call("drivetrain_backward", loss=loss, kwargs=kwargs, models=list(self._models)):
            loss.backward(**kwargs)

    def _do_sync(self) -> None:
        """Decide whether this step synchronises gradients (end of window or of data)."""
        if self.gradient_state.sync_with_dataloader and self.gradient_state.end_of_dataloader:
            self.step = 0
            self.gradient_state._set_sync_gradients(True)
        else:
            self.step += 1
            self.gradient_state._set_sync_gradients((self.step % self.gradient_state.num_steps) == 0)

    @contextlib.contextmanager
    def no_sync(self, model: torch.nn.Module) -> Iterator[None]:
        """Run backward without synchronising gradients across processes."""
        context = self.run.call("drivetrain_no_sync", model=model)
        with context if context is not None else contextlib.nullcontext():
            yield

    @contextlib.contextmanager
    def accumulate(self, *models: torch.nn.Module) -> Iterator[None]:
        """One micro-batch of gradient accumulation: gradients synchronise at the window's end."""
        self._do_sync()
        if self.sync_gradients or self.gradient_state.sync_each_batch or not models:
            yield  # the common step: nothing to enter
            return
        with contextlib.ExitStack() as stack:
            for model in models:
                stack.enter_context(self.no_sync(model))
            yield

    @contextlib.contextmanager
    def trigger_sync_in_backward(self, model: torch.nn.Module) -> Iterator[None]:
        """Synchronise in the next backward even inside ``no_sync``."""
        context = self.run.call("drivetrain_sync_in_backward", model=model)
        with context if context is not None else contextlib.nullcontext():
            yield

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Divide fp16 gradients by the loss scale (once per step), before clipping."""
        if self.scaler is None:
            return
        optimizers = [optimizer] if optimizer is not None and not isinstance(optimizer, (list, tuple)) else (
            optimizer or self._optimizers)
        for opt in optimizers:
            try:
                self.scaler.unscale_(getattr(opt, "optimizer", opt))
            except RuntimeError as error:  # already unscaled in this step: nothing left to do
                if "already been called" not in str(error):
                    raise

    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = 2) -> torch.Tensor | None:
        """Clip the gradient norm (after unscaling); returns the total norm.

        ``None`` when the strategy clips inside its own step and measured no norm there.
        """
        parameters = list(parameters) if not isinstance(parameters, torch.Tensor) else [parameters]
        self.unscale_gradients()
        norm = self.run.call("drivetrain_clip_grad_norm", parameters=parameters, max_norm=max_norm,
                             norm_type=norm_type)
        if norm is None:
            norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)
        return None if norm is False else norm  # False: the strategy clipped but measured no norm

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        """Clip each gradient to ``[-clip_value, clip_value]`` (after unscaling).

        A strategy that cannot (its engine steps inside ``backward``, or its gradients are
        sharded) raises before anything changes; use :meth:`clip_grad_norm_` there.
        """
        parameters = list(parameters) if not isinstance(parameters, torch.Tensor) else [parameters]
        if self.run.call("drivetrain_clip_grad_value", parameters=parameters, clip_value=clip_value):
            return
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    @contextlib.contextmanager
    def autocast(self, autocast_handler: AutocastKwargs | None = None) -> Iterator[None]:
        """Run the block in the run's mixed precision."""
        handler = autocast_handler or self.run.handler_kwargs.get("AutocastKwargs") or AutocastKwargs()
        context = self.run.call("drivetrain_autocast", kwargs=handler.to_kwargs())
        with context if context is not None else contextlib.nullcontext():
            yield

    def unwrap_model(self, model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                     keep_torch_compile: bool = True) -> torch.nn.Module:
        """The user's module from inside a prepared one."""
        compiled = model if hasattr(model, "_orig_mod") else None
        inner = model._orig_mod if compiled is not None else model
        inner = self.run.call("drivetrain_unwrap_model", model=inner, keep_fp32_wrapper=keep_fp32_wrapper) or inner
        if not keep_fp32_wrapper:
            remove_mixed_precision_forward(inner)
        if keep_torch_compile and compiled is not None and compiled._orig_mod is inner:
            return compiled
        return inner

    # ------------------------------------------------ process control

    def wait_for_everyone(self) -> None:
        """Barrier; also waits until the last ``save_state`` checkpoint is on disk, raising if it failed."""
        from .checkpointing import commit
        from .checkpointing.run_state import finish_commit

        if commit.pending() is not None:
            finish_commit(self)  # a gather of every process's outcome: a barrier too
        else:
            self.state.wait_for_everyone()
        self._tell_published_checkpoints()

    def save(self, obj: Any, f: str | os.PathLike, safe_serialization: bool = False) -> None:
        """Save ``obj`` on the main process (on each node's main one with ``save_on_each_node``)."""
        if not self._saves_files_here():
            return
        if isinstance(f, (str, os.PathLike)) and os.path.isdir(f):
            raise CheckpointError(f"save() writes one file and {os.fspath(f)} is a directory; name a file in it, "
                                  "e.g. os.path.join(directory, 'state.pt')")
        if safe_serialization:
            from safetensors.torch import save_file

            save_file(obj, os.fspath(f), metadata={"format": "pt"})
        else:
            torch.save(obj, f)

    def _saves_files_here(self) -> bool:
        """Whether ``save``/``save_model`` write on this process: ``ProjectConfiguration.save_on_each_node``."""
        if self.project_configuration.save_on_each_node:
            return self.is_local_main_process
        return self.is_main_process

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Save and load these objects (anything with ``state_dict``/``load_state_dict``) with the state."""
        invalid = [type(o).__name__ for o in objects if not (hasattr(o, "state_dict") and hasattr(o, "load_state_dict"))]
        if invalid:
            raise ConfigError(f"cannot checkpoint {invalid}: objects need state_dict() and load_state_dict()")
        self._custom_objects.extend(objects)

    # ---------------------------------------------------------- checkpoints

    def save_state(self, output_dir: str | os.PathLike | None = None, safe_serialization: bool = True,
                   **save_model_func_kwargs: Any) -> str:
        """Save everything needed to resume exactly; returns the checkpoint directory.

        Returns once every process has written its files; syncing them and renaming the
        directory into place then overlaps training (``DRIVETRAIN_CHECKPOINT_BACKGROUND=0``
        waits instead). The checkpoint appears only when complete and synced on every
        process; a crash leaves the previous one intact. ``load_state``, the next
        ``save_state``, ``wait_for_everyone`` and ``end_training`` wait for it first. With
        automatic checkpoint naming, ``total_limit`` older ones are kept.
        """
        from .checkpointing.run_state import save_run_state

        weights = None
        if self._save_model_state_pre_hook:
            models = list(self._models)
            weights = [self.get_state_dict(model, unwrap=True) for model in models]
            for hook in self._save_model_state_pre_hook.values():
                hook(models, weights, output_dir)
        directory = str(save_run_state(self, output_dir, safe_serialization, weights, save_model_func_kwargs))
        self._tell_published_checkpoints()  # the previous save's, or this one's when committed in place
        return directory

    def _on_checkpoint_saved(self, directory: os.PathLike) -> None:
        """Called from the commit's thread once a checkpoint is in place, on the process that published it.

        Tracker libraries are not all thread-safe, so the notice waits for this object's next
        call on the training thread (log, save_state, load_state, wait_for_everyone, end_training).
        """
        self._published_checkpoints.append(os.fspath(directory))

    def _tell_published_checkpoints(self) -> None:
        while self._published_checkpoints:
            self._tell_checkpoint("save", self._published_checkpoints.popleft())

    def _tell_checkpoint(self, event: str, directory: os.PathLike) -> None:
        try:
            self.run.call("drivetrain_on_checkpoint", event=event, directory=os.fspath(directory))
        except Exception as exc:  # a notification never costs a checkpoint
            logger.warning("a plugin failed on checkpoint %s of %s: %s: %s", event, os.fspath(directory),
                           type(exc).__name__, exc)
        if self.trackers:
            self.trackers.on_checkpoint(event, os.fspath(directory))

    def load_state(self, input_dir: str | os.PathLike | None = None, load_kwargs: dict[str, Any] | None = None,
                   **load_model_func_kwargs: Any) -> str:
        """Restore a checkpoint written by :meth:`save_state` (the newest one when none is named).

        ``load_model_func_kwargs`` go to the model's load function (``strict``, ``assign``;
        a strategy's engine takes its own); ``map_location`` (here or in ``load_kwargs``)
        places the tensors of registered objects. Every file is verified against its
        checksum and every state checked against its object before anything changes.
        """
        from .checkpointing.run_state import finish_commit, input_directory, load_run_state

        finish_commit(self)
        self._tell_published_checkpoints()
        if self._load_model_state_pre_hook:
            directory = str(input_directory(self, input_dir))
            for hook in self._load_model_state_pre_hook.values():
                hook(list(self._models), directory)
        directory = str(load_run_state(self, input_dir, options=load_model_func_kwargs, load_kwargs=load_kwargs))
        self._tell_checkpoint("load", directory)
        return directory

    def register_save_state_pre_hook(self, hook: Callable[..., None]) -> Any:
        """Call ``hook(models, weights, output_dir)`` before saving; ``handle.remove()`` undoes it."""
        from torch.utils.hooks import RemovableHandle

        handle = RemovableHandle(self._save_model_state_pre_hook)
        self._save_model_state_pre_hook[handle.id] = hook
        return handle

    def register_load_state_pre_hook(self, hook: Callable[..., None]) -> Any:
        """Call ``hook(models, input_dir)`` before loading; ``handle.remove()`` undoes it."""
        from torch.utils.hooks import RemovableHandle

        handle = RemovableHandle(self._load_model_state_pre_hook)
        self._load_model_state_pre_hook[handle.id] = hook
        return handle

    def get_state_dict(self, model: torch.nn.Module, unwrap: bool = True) -> dict[str, Any]:
        """The full state dict of a prepared model (gathered where the strategy shards it)."""
        state = self.run.call("drivetrain_get_state_dict", model=model, unwrap=unwrap)
        if state is None:
            state = (self.unwrap_model(model, keep_fp32_wrapper=False) if unwrap else model).state_dict()
        return state

    def save_model(self, model: torch.nn.Module, save_directory: str | os.PathLike, max_shard_size: int | str = "10GB",
                   safe_serialization: bool = True) -> None:
        """Write the model's full weights (sharded above ``max_shard_size``) on the main process."""
        from .checkpointing.io_pool import FileJobs
        from .checkpointing.model_files import remove_stale_weight_files, write_model_files
        from .checkpointing.target import refuse_non_directory

        refuse_non_directory(pathlib.Path(save_directory).absolute())
        state = self.get_state_dict(model, unwrap=True)
        if self._saves_files_here():
            with FileJobs() as jobs:  # shards side by side
                written = write_model_files(state, save_directory, max_shard_size=max_shard_size,
                                            safe_serialization=safe_serialization, jobs=jobs)
            remove_stale_weight_files(save_directory, written)  # the user's other files stay
        self.state.wait_for_everyone()  # not a checkpoint: no need to wait for a save_state commit

    def free_memory(self, *objects: Any) -> list[None]:
        """Forget every prepared object and free device memory."""
        from .memory import release_memory

        self._models, self._optimizers, self._schedulers, self._dataloaders = [], [], [], []
        self.step = 0
        return release_memory(*objects)

    clear = free_memory

    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Iterator[Any]:
        """Profile the block with ``torch.profiler``; writes a trace when asked."""
        from .profiling import build_profiler, export_trace

        handler = profile_handler or self.run.handler_kwargs.get("ProfileKwargs") or ProfileKwargs()
        with build_profiler(handler, self.run.platform.device_type) as profiler:
            yield profiler
        export_trace(profiler, handler, self.process_index)

    def verify_device_map(self, model: torch.nn.Module) -> bool:
        """Whether the model was dispatched across devices by a device map (big-model inference)."""
        return any(getattr(m, "hf_device_map", None) and len(m.hf_device_map) > 1 for m in model.modules())

    # ------------------------------------------------------------ trackers

    def init_trackers(self, project_name: str, config: dict | None = None, init_kwargs: dict | None = None) -> None:
        if not self.trackers:
            return
        self.trackers.init_trackers(project_name, config=config, init_kwargs=init_kwargs or {})

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        if not self.trackers:
            from .tracking import GeneralTracker

            return GeneralTracker(_blank=True)
        return self.trackers.get_tracker(name, unwrap=unwrap)

    def log(self, values: dict[str, Any], step: int | None = None, log_kwargs: dict | None = None) -> None:
        self._tell_published_checkpoints()
        if self.trackers:
            self.trackers.log(values, step=step, log_kwargs=log_kwargs or {})

    def end_training(self) -> None:
        """Wait for the last checkpoint (trackers hear of it), then end the trackers."""
        try:
            self.wait_for_everyone()
        finally:
            if self.trackers:
                self.trackers.end_training()

    def __repr__(self) -> str:
        return f"Accelerator(device={self.device}, processes={self.num_processes}, mixed_precision={self.mixed_precision})"
