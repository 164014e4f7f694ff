"""Process state shared by every object of a process: ``PartialState``, ``AcceleratorState``
and ``GradientState``, API-compatible with Accelerate's.

Each class keeps one shared dictionary (every instance sees the same state), initialised on
first use: choosing the plugins, placing the device and joining the process group happen
once per process.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from datetime import timedelta
from typing import Any, Callable, Iterator, Mapping

from ..kernel import environment
from ..selection.backend_arguments import BackendArgument, given_backend_arguments
from .backend_attributes import backend_attribute_host, install_declared
from ..selection.enums import DistributedType
from ..kernel.errors import ConfigError, DistributedError
from ..kernel.plugin_manager import get_plugin_manager
from . import collective_watch
from .run import Run
from ..selection.choice import Requests, requests_from_env, select
from ..selection.backend_variables import requested_features

logger = logging.getLogger("drivetrain.state")  # its name before the layers, kept for log filters

DEFAULT_TIMEOUT = timedelta(minutes=30)


def _timeout_from(value: Any) -> timedelta | None:
    if value is None:
        return None
    try:
        seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    except (TypeError, ValueError):
        seconds = None
    if isinstance(value, bool) or seconds is None or not seconds > 0:
        raise ConfigError(f"timeout must be a positive number of seconds or a timedelta, not {value!r}")
    return timedelta(seconds=seconds)


class _AssignableDistributedType:
    """``distributed_type``: the run's, unless assigned.

    Accelerate keeps it as a plain attribute that scripts and tests assign to see how the API
    answers another kind of run (``state.distributed_type = DistributedType.FSDP``); the value
    assigned is kept in the state's shared dict until the state is reset. It changes what the
    facade reports and decides from it, never how the run was set up.
    """

    key = "_assigned_distributed_type"

    def __get__(self, state: Any, owner: type) -> Any:
        if state is None:
            return self
        assigned = state._shared_state.get(self.key)
        return assigned if assigned is not None else DistributedType(state.run.selection.distributed_type)

    def __set__(self, state: Any, value: Any) -> None:
        state._shared_state[self.key] = DistributedType(value)


class PartialState:
    """Where this process is: device, rank, number of processes, and how to coordinate.

    Args:
        cpu: force the CPU platform even when an accelerator is detected.
        **kwargs: passed to the process group's creation: ``backend``, ``init_method``,
            ``timeout`` (a ``timedelta`` or seconds). The timeout really applies: a
            collective that a peer never joins fails after it.
    """

    _shared_state: dict[str, Any] = {}

    def __init__(self, cpu: bool = False, **kwargs: Any) -> None:
        self.__dict__ = self._shared_state
        if self.initialized:
            if cpu and self.device.type != "cpu":
                logger.warning("PartialState was already initialised on %s; cpu=True is ignored", self.device)
            return
        unknown = set(kwargs) - {"backend", "init_method", "timeout"}
        if unknown:
            raise ConfigError(f"unknown process-group option(s) {sorted(unknown)}; use backend, init_method or timeout "
                              "(InitProcessGroupKwargs(...).to_kwargs())")
        try:
            self._initialize(cpu, kwargs)
        except BaseException:
            self._shared_state.clear()  # a failed start leaves nothing half made
            raise

    def _initialize(self, cpu: bool, kwargs: dict[str, Any]) -> None:
        manager = get_plugin_manager()
        install_declared(manager)  # the plugins' attributes of Accelerator, AcceleratorState, GradientState
        requests = Requests(cpu=True if cpu else None).merged_over(requests_from_env(manager))
        selection = select(manager, requests)
        platform = manager.construct(selection.platform_plugin, selection.platform,
                                     f"platform {selection.platform.name!r}")
        run = Run(manager, selection, platform)
        run.state = self
        for feature in requested_features(manager):  # DRIVETRAIN_USE_<FEATURE>=1
            run.activate_feature(feature)
        self.platform = platform
        self.cluster = selection.cluster
        self.debug = environment.read_bool("DEBUG_MODE")
        self.fork_launched = environment.read_bool("FORK_LAUNCHED")
        self.device = _device_override(platform) or platform.device_for(self.cluster.local_rank)
        self.init_process_group_kwargs = dict(kwargs)
        # What bounds every wait on a peer: collectives, and the checkpoint commit's waits.
        self.collective_timeout = _timeout_from(kwargs.get("timeout")) or DEFAULT_TIMEOUT
        if self.cluster.world_size > 1 or environment.read("TORCH_DEVICE") is not None:
            platform.set_device(self.device)
            timeout = (_timeout_from(kwargs.get("timeout")) or _timeout_from(environment.read_checked("TIMEOUT"))
                       or DEFAULT_TIMEOUT)
            self.collective_timeout = timeout
            joined = run.call("drivetrain_init_distributed", timeout=timeout, backend=kwargs.get("backend"),
                              init_method=kwargs.get("init_method"))
            if not joined:
                raise DistributedError(
                    f"{self.cluster.world_size} processes but no active plugin joined them "
                    f"(drivetrain_init_distributed; active: {', '.join(run.active_plugins)}); see "
                    "`drivetrain plugins list` and check DRIVETRAIN_BLOCK_PLUGINS"
                )
            # a collective that outlives the timeout is reported with where each rank is
            collective_watch.start_watch(timeout.total_seconds(), self.cluster.world_size)
        self._mixed_precision = selection.mixed_precision
        self.run = run  # last: `initialized` is true only once everything above worked
        manager.mark_active(run.active_plugins)

    # ------------------------------------------------------------- attributes

    @property
    def initialized(self) -> bool:
        return "run" in self._shared_state

    def __reduce__(self) -> tuple:
        # The state is this process's (its run, plugins, process group), not data: a pickled
        # reference is the state of the process that loads it.
        return (type(self), ())

    def __getattr__(self, name: str) -> Any:
        # Answers nothing: only words the error. Reached for a missing attribute, and for a
        # property whose attributes are gone (``num_processes`` reads ``cluster``): after
        # ``_reset_state()`` the message says why.
        raise _missing_attribute(self, name, initialized=self.initialized)

    def __repr__(self) -> str:
        return (
            f"Distributed environment: {self.distributed_type}\n"
            f"Num processes: {self.num_processes}\n"
            f"Process index: {self.process_index}\n"
            f"Local process index: {self.local_process_index}\n"
            f"Device: {self.device}\n"
        )

    distributed_type = _AssignableDistributedType()

    @property
    def num_processes(self) -> int:
        return self.cluster.world_size

    @property
    def process_index(self) -> int:
        return self.cluster.rank

    @property
    def local_process_index(self) -> int:
        return self.cluster.local_rank

    @property
    def num_machines(self) -> int:
        return self.cluster.num_nodes

    @property
    def use_distributed(self) -> bool:
        return self.num_processes > 1

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        return self.process_index == self.num_processes - 1

    @property
    def mixed_precision(self) -> str:
        return self._mixed_precision

    @property
    def backend(self) -> str | None:
        return getattr(self.run.collectives, "backend", None)

    @property
    def collectives(self):
        return self.run.collectives

    # -------------------------------------------------------- coordination

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this point."""
        if self.num_processes > 1:
            self.run.collectives.barrier()

    def _goes_first(self, first: bool) -> Iterator[None]:
        if not first:
            self.wait_for_everyone()
        yield
        if first:
            self.wait_for_everyone()

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """The main process runs the block first; the others run it after it finished."""
        yield from self._goes_first(self.is_main_process)

    @contextlib.contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """Like :meth:`main_process_first`, per machine."""
        yield from self._goes_first(self.is_local_main_process)

    def _only_when(self, condition: Callable[[], bool], function: Callable | None) -> Callable:
        if function is None:  # used as @state.on_process(process_index=1)
            return functools.partial(self._only_when, condition)

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if condition():
                return function(*args, **kwargs)
            return None

        return wrapper

    def on_main_process(self, function: Callable | None = None) -> Callable:
        """Decorator: run ``function`` on the main process only."""
        return self._only_when(lambda: self.is_main_process, function)

    def on_local_main_process(self, function: Callable | None = None) -> Callable:
        """Decorator: run ``function`` on each machine's main process only."""
        return self._only_when(lambda: self.is_local_main_process, function)

    def on_last_process(self, function: Callable | None = None) -> Callable:
        """Decorator: run ``function`` on the last process only."""
        return self._only_when(lambda: self.is_last_process, function)

    def on_process(self, function: Callable | None = None, process_index: int | None = None) -> Callable:
        """Decorator: run ``function`` on the process with global index ``process_index``."""
        if process_index is None:
            raise ConfigError("on_process needs process_index=N")
        return self._only_when(lambda: self.process_index == process_index, function)

    def on_local_process(self, function: Callable | None = None, local_process_index: int | None = None) -> Callable:
        """Decorator: run ``function`` on the process with this local index on each machine."""
        if local_process_index is None:
            raise ConfigError("on_local_process needs local_process_index=N")
        return self._only_when(lambda: self.local_process_index == local_process_index, function)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the local main process only."""
        if self.is_local_main_process:
            print(*args, **kwargs)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """This process's share of ``inputs`` (list, tuple, dict of them, tensor, dataset).

        Shares differ by at most one element; with ``apply_padding`` every process gets the
        same number, the last element repeated, so the results can be gathered.
        """
        yield _split(inputs, self.num_processes, self.process_index, apply_padding)

    # ----------------------------------------------------------- devices

    def set_device(self) -> None:
        """Make this process's device the current one of its platform."""
        self.platform.set_device(self.device)

    def destroy_process_group(self, group: Any = None) -> None:
        """Leave the process group (call once at the end of a script that wants a clean exit).

        In a worker forked by ``notebook_launcher``/``debug_launcher`` the default group is
        left to the launcher, as in Accelerate.
        """
        if self.fork_launched and group is None:
            return
        collectives = self.run._collectives
        if collectives is not None and hasattr(collectives, "destroy"):
            collectives.destroy(group)
        self.run.forget_collectives()

    @classmethod
    def _reset_state(cls, reset_partial_state: bool = True) -> None:
        """Forget everything (tests, notebooks). The process group, if any, stays."""
        if reset_partial_state:
            cls._shared_state.clear()

    @property
    def default_device(self):
        return self.platform.device_for(0)


def _device_override(platform: Any) -> torch.device | None:
    """The device ``DRIVETRAIN_TORCH_DEVICE`` (``ACCELERATE_TORCH_DEVICE``) names for this process,
    which must be one of the chosen platform's."""
    name = environment.read_checked("TORCH_DEVICE")
    if name is None:
        return None
    import torch

    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type != torch.device(platform.device_type).type:
        variable = "/".join(environment.names_of("TORCH_DEVICE"))
        raise ConfigError(f"{variable}={name!r} is not a device of this process's platform: it runs on the "
                          f"{platform.device_type!r} platform; name one of its devices "
                          f"(e.g. {platform.device_type}:0) or choose the platform with DRIVETRAIN_PLATFORM")
    return device


def _missing_attribute(state: Any, name: str, initialized: bool) -> AttributeError:
    """The error for ``state.<name>``: a state that was reset names ``_reset_state()`` as the
    cause when ``name`` is one of the attributes a set-up state has."""
    owner = type(state).__name__
    # AcceleratorState answers PartialState's attributes too
    known = any(name in vars(klass) for klass in (*type(state).__mro__, PartialState)) or name in _SET_UP_ATTRIBUTES
    if initialized or not known or name.startswith("__"):
        return AttributeError(f"'{owner}' object has no attribute '{name}'")
    return AttributeError(
        f"`{owner}` object has no attribute `{name}`. This happens if `{owner}._reset_state()` was called "
        f"and an `Accelerator` or `PartialState` was not created again afterwards; create one before reading `{name}`"
    )


# What a set-up state keeps in its shared dict (not class members, hence listed).
_SET_UP_ATTRIBUTES = frozenset({"run", "platform", "cluster", "debug", "fork_launched", "device",
                                "init_process_group_kwargs", "collective_timeout", "_mixed_precision",
                                "_partial", "_run", "plugins", "dynamo_plugin"})

def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _sample_counts(inputs: dict, prefix: str = "") -> dict[str, int]:
    """The length of every value of a (nested) dict that is split, by its key path."""
    counts: dict[str, int] = {}
    for key, value in inputs.items():
        if isinstance(value, dict):
            counts.update(_sample_counts(value, f"{prefix}{key!r}."))
        elif hasattr(value, "__len__") and not isinstance(value, (str, bytes)):
            counts[f"{prefix}{key!r}"] = len(value)
    return counts


def _check_one_length(inputs: dict) -> None:
    """Refuse a dict whose values hold different numbers of samples: which share goes with which
    is ambiguous. Checked on one process too, so a script never passes alone and fails on two."""
    counts = _sample_counts(inputs)
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{key} has {count}" for key, count in list(counts.items())[:4])
        raise ConfigError(f"split_between_processes splits a dict by sample, so every value needs the same length "
                          f"({shown}): pad or trim them to one length, or split each value on its own")


def _split(inputs: Any, parts: int, index: int, apply_padding: bool) -> Any:
    if isinstance(inputs, dict):
        _check_one_length(inputs)
    if parts == 1:
        return inputs
    if isinstance(inputs, dict):
        return {key: _split(value, parts, index, apply_padding) for key, value in inputs.items()}
    if not hasattr(inputs, "__len__") or isinstance(inputs, (str, bytes)):
        return inputs  # nothing to split: every process gets it whole
    length = len(inputs)
    per_part, extra = divmod(length, parts)
    start = index * per_part + min(index, extra)
    end = min(start + per_part + (1 if index < extra else 0), length)
    target = per_part + (1 if extra else 0)
    # a datasets.Dataset: rows are picked with select() (slicing one gives a dict of columns;
    # it has a shape too, so only a tensor's select(dim, index) is told apart by its type)
    if hasattr(inputs, "select") and not _is_tensor(inputs):
        indices = list(range(start, end)) if start < length else [length - 1]
        if apply_padding:
            indices += [indices[-1]] * (target - len(indices))
        return inputs.select(indices)
    share = inputs[start:end] if start < length else inputs[-1:]
    if apply_padding:
        missing = target - len(share)
        if missing > 0:
            filler = share[-1:]
            if hasattr(share, "shape"):
                import torch

                share = torch.cat([share, filler.repeat(missing, *([1] * (share.dim() - 1)))])
            else:
                share = share + type(share)(list(filler) * missing)
    return share


def _from_partial(name: str) -> property:
    """An ``AcceleratorState`` attribute that is its ``PartialState``'s ``name``."""
    return property(lambda self: getattr(self._process_state(name), name),
                    doc=f"The process's ``{name}`` (:class:`PartialState`).")


def _from_process(name: str) -> property:
    """An ``AcceleratorState`` attribute answered by ``PartialState()``, set up or not."""
    return property(lambda self: getattr(PartialState(), name), doc=f"``PartialState().{name}``.")


@backend_attribute_host("AcceleratorState")
class AcceleratorState:
    """``PartialState`` plus what an ``Accelerator`` adds: mixed precision, strategy, plugins.

    Attributes of the process (device, ranks, ...) are properties reading the ``PartialState``;
    Accelerate's attributes of a backend (``deepspeed_plugin``, ``is_fsdp2``) are declared by
    plugins (:mod:`drivetrain.runtime.backend_attributes`).
    """

    _shared_state: dict[str, Any] = {}

    def __init__(self, mixed_precision: str | None = None, cpu: bool = False, dynamo_plugin: Any = None,
                 deepspeed_plugin: BackendArgument = None, fsdp_plugin: BackendArgument = None,
                 torch_tp_plugin: BackendArgument = None, megatron_lm_plugin: BackendArgument = None,
                 parallelism_config: BackendArgument = None, _from_accelerator: bool = False, *,
                 strategy: str | None = None, precision_backend: str | None = None,
                 strategy_arguments: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.__dict__ = self._shared_state
        # Accelerate's backend arguments (its parameters above, and any other `<name>_plugin=`
        # keyword: their classes come from plugins) are kept, by keyword, in `plugins`.
        backend_plugins = {key: kwargs.pop(key) for key in list(kwargs) if key.endswith("_plugin")}
        backend_plugins.update(given_backend_arguments(AcceleratorState.__init__, locals()))
        if self._shared_state.get("_initialized") and not self.initialized:
            self._shared_state.clear()  # its PartialState was reset: nothing of the old run is kept
        if self.initialized:
            if mixed_precision is not None and str(mixed_precision).lower() != self.mixed_precision:
                raise ConfigError(
                    f"AcceleratorState is already initialised with mixed_precision={self.mixed_precision!r}; "
                    "create one Accelerator per process (or call AcceleratorState._reset_state() first)"
                )
            return
        partial = PartialState(cpu, **kwargs)
        self._partial = partial
        run = partial.run
        # Choose strategy and precision afresh for every new AcceleratorState (the arguments
        # win over the environment): after _reset_state() a run must not keep the previous
        # Accelerator's choice. Platform and cluster environment stay the process's.
        requests = Requests(mixed_precision=None if mixed_precision is None else str(mixed_precision),
                            strategy=strategy, precision_backend=precision_backend)
        env_requests = requests_from_env(run.manager)
        env_requests.platform = run.selection.platform.name
        previous = run.selection
        selection = select(run.manager, requests.merged_over(env_requests), cluster=previous.cluster)
        selection.cluster_plugin, selection.reasons["cluster"] = previous.cluster_plugin, previous.reasons.get("cluster", "")
        # One run per AcceleratorState, with its own strategy and precision objects: what the
        # previous Accelerator gave its plugins belongs to that state's run, not to this one.
        arguments = {**{key: value for key, value in backend_plugins.items() if value is not None},
                     **(strategy_arguments or {})}
        run = run.successor(selection, arguments, accelerator_state=self)
        partial.run = run
        self.dynamo_plugin = dynamo_plugin
        self.plugins: dict[str, Any] = {key: value for key, value in backend_plugins.items() if value is not None}
        self._run = run
        self._initialized = True

    @property
    def initialized(self) -> bool:
        """Set up, for the process's current run: ``PartialState._reset_state()`` alone (as
        scripts and tests call it) leaves an ``AcceleratorState`` of a run that is gone, which a
        new ``Accelerator`` builds afresh."""
        return (self._shared_state.get("_initialized", False)
                and PartialState._shared_state.get("run") is self._shared_state.get("_run"))

    def __reduce__(self) -> tuple:
        return (type(self), ())  # as PartialState's: the loading process's state

    # ------------------------------------------- the declared attributes of a backend

    def _backend_run(self, name: str) -> Run | None:
        if "_partial" not in self._shared_state:
            raise _missing_attribute(self, name, initialized=False)
        return getattr(self._shared_state["_partial"], "run", None)

    def _backend_arguments(self) -> dict[str, Any]:
        """The backend objects given by keyword (``fsdp_plugin=``)."""
        return self._shared_state.get("plugins") or {}

    # ------------------------------------------------- the process's attributes

    def _process_state(self, name: str) -> PartialState:
        if "_partial" not in self._shared_state:
            raise _missing_attribute(self, name, initialized=False)
        return self._shared_state["_partial"]

    platform = _from_partial("platform")
    cluster = _from_partial("cluster")
    device = _from_partial("device")
    debug = _from_partial("debug")
    init_process_group_kwargs = _from_partial("init_process_group_kwargs")
    collective_timeout = _from_partial("collective_timeout")
    num_processes = _from_partial("num_processes")
    process_index = _from_partial("process_index")
    local_process_index = _from_partial("local_process_index")
    num_machines = _from_partial("num_machines")
    backend = _from_partial("backend")
    collectives = _from_partial("collectives")
    default_device = _from_partial("default_device")
    on_main_process = _from_partial("on_main_process")
    on_local_main_process = _from_partial("on_local_main_process")
    on_last_process = _from_partial("on_last_process")
    on_process = _from_partial("on_process")
    on_local_process = _from_partial("on_local_process")
    set_device = _from_partial("set_device")
    # The process and its group outlive an Accelerator: these answer from ``PartialState()``
    # even after ``AcceleratorState._reset_state()`` (a script that resets the state still
    # waits for its peers and destroys the group at the end).
    fork_launched = _from_process("fork_launched")
    use_distributed = _from_process("use_distributed")
    is_main_process = _from_process("is_main_process")
    is_local_main_process = _from_process("is_local_main_process")
    is_last_process = _from_process("is_last_process")
    wait_for_everyone = _from_process("wait_for_everyone")
    split_between_processes = _from_process("split_between_processes")
    main_process_first = _from_process("main_process_first")
    local_main_process_first = _from_process("local_main_process_first")
    print = _from_process("print")
    destroy_process_group = _from_process("destroy_process_group")

    def __repr__(self) -> str:
        return repr(self._process_state("__repr__")) + f"Mixed precision type: {self.mixed_precision}\n"

    @property
    def run(self) -> Run:
        return self._process_state("run").run

    @property
    def mixed_precision(self) -> str:
        return self.run.selection.mixed_precision

    distributed_type = _AssignableDistributedType()

    @classmethod
    def _reset_state(cls, reset_partial_state: bool = False) -> None:
        cls._shared_state.clear()
        if reset_partial_state:
            PartialState._reset_state()


@backend_attribute_host("GradientState")
class GradientState:
    """Whether gradients are synchronised in this step, and where the data loader stands.

    Shared by the ``Accelerator``, its data loaders and its scheduler.
    """

    _shared_state: dict[str, Any] = {}

    def __init__(self, gradient_accumulation_plugin: Any = None) -> None:
        self.__dict__ = self._shared_state
        if not self.initialized:
            install_declared(get_plugin_manager())  # its declared attributes, without a PartialState too
            self.sync_gradients = True
            self.active_dataloader = None
            self.dataloader_references: list[Any] = [None]
            self.plugin_kwargs: dict[str, Any] = {}  # what is left out has its default (the properties below)
        if gradient_accumulation_plugin is not None:
            self.plugin_kwargs = gradient_accumulation_plugin.to_kwargs()

    @property
    def initialized(self) -> bool:
        return "sync_gradients" in self._shared_state

    @property
    def num_steps(self) -> int:
        return self.plugin_kwargs.get("num_steps") or 1  # None: Accelerate's default, one step

    @property
    def adjust_scheduler(self) -> bool:
        # As Accelerate's: ``plugin_kwargs`` omits fields left at their defaults, and an absent
        # ``adjust_scheduler`` reads False, so only a plugin built with it away from its default
        # changes a scheduler's count during accumulation (Trainer's schedules match Accelerate's).
        return self.plugin_kwargs.get("adjust_scheduler", False)

    @property
    def sync_with_dataloader(self) -> bool:
        return self.plugin_kwargs.get("sync_with_dataloader", True)

    @property
    def sync_each_batch(self) -> bool:
        return self.plugin_kwargs.get("sync_each_batch", False)

    @property
    def end_of_dataloader(self) -> bool:
        return self.active_dataloader is not None and getattr(self.active_dataloader, "end_of_dataloader", False)

    @property
    def remainder(self) -> int:
        return -1 if self.active_dataloader is None else getattr(self.active_dataloader, "remainder", -1)

    @property
    def in_dataloader(self) -> bool:
        return self.active_dataloader is not None

    # Accelerate's attributes of a backend (``is_xla_gradients_synced``) are declared by plugins
    # (:mod:`drivetrain.runtime.backend_attributes`); a step that sets one on the shared state wins.

    def _backend_run(self, name: str) -> Run | None:
        return PartialState._shared_state.get("run")

    def _backend_arguments(self) -> dict[str, Any]:
        return {}

    def __reduce__(self) -> tuple:
        return (type(self), ())  # as PartialState's: the loading process's state

    def _set_sync_gradients(self, sync_gradients: bool) -> None:
        self.sync_gradients = sync_gradients

    def _add_dataloader(self, dataloader: Any) -> None:
        self.active_dataloader = dataloader
        self.dataloader_references.append(dataloader)

    def _remove_dataloader(self, dataloader: Any) -> None:
        if dataloader in self.dataloader_references:
            self.dataloader_references.remove(dataloader)
        self.active_dataloader = self.dataloader_references[-1]

    def __repr__(self) -> str:
        return (f"Sync Gradients: {self.sync_gradients}\nAt end of current dataloader: {self.end_of_dataloader}\n"
                f"Extra samples added: {self.remainder}\nGradient accumulation plugin: {self.plugin_kwargs}\n")

    @classmethod
    def _reset_state(cls) -> None:
        cls._shared_state.clear()


def is_initialized() -> bool:
    """Whether a ``PartialState`` exists in this process."""
    return "run" in PartialState._shared_state


__all__ = ["PartialState", "AcceleratorState", "GradientState", "is_initialized"]
