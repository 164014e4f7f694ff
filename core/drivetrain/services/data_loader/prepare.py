"""``prepare_data_loader`` and ``skip_first_batches``: a user's loader rebuilt for this process."""

from __future__ import annotations

import copy
import inspect
import numbers
from typing import Any, Callable, Iterator

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

from ...kernel.errors import ConfigError
from ...runtime.state import PartialState

from .mesh import data_parallel_share, shares_batches_across_peers
from .draws import EpochDraws, draw_int64
from .progress import _PreparedLoader, _Progress, epoch_followers
from .sharding import (
    BatchSamplerShard,
    IterableDatasetShard,
    SeedableRandomSampler,
    SkipBatchSampler,
    SkipDataLoader,
    _Unbatched,
)
from .stateful import stateful_dataloader_class
from .transport import DataLoaderDispatcher, DataLoaderShard


# DataLoader arguments copied from the user's loader to the prepared one (the sampling ones
# are replaced, ``generator`` becomes the loader's own).
_SAMPLING_ARGUMENTS = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last", "generator")


def _loader_arguments(dataloader: DataLoader) -> dict[str, Any]:
    names = [name for name in inspect.signature(DataLoader.__init__).parameters if name != "self"]
    return {name: getattr(dataloader, name) for name in names
            if name not in _SAMPLING_ARGUMENTS and hasattr(dataloader, name)}


class DataLoaderAdapter:
    """Wraps a data loader (a ``torch`` ``DataLoader`` or a stateful one, such as
    ``torchdata``'s ``StatefulDataLoader``) and behaves as it: attributes, iteration and
    length come from the wrapped loader, and ``isinstance`` checks see its class.

    Args:
        dataset: the dataset of the loader to build.
        use_stateful_dataloader: build ``torchdata.stateful_dataloader.StatefulDataLoader``
            (its position is saved by its own ``state_dict``).
        batch_sampler: passed on to the loader.
        **kwargs: the other ``DataLoader`` arguments.
    """

    def __init__(self, dataset: Any, use_stateful_dataloader: bool = False, batch_sampler: Any = None,
                 **kwargs: Any) -> None:
        self.use_stateful_dataloader = use_stateful_dataloader
        if use_stateful_dataloader:
            self.base_dataloader = stateful_dataloader_class()(dataset, batch_sampler=batch_sampler, **kwargs)
        else:
            self.base_dataloader = DataLoader(dataset, batch_sampler=batch_sampler, **kwargs)
        if hasattr(self.base_dataloader, "state_dict"):
            self.dl_state_dict = self.base_dataloader.state_dict()

    def __getattr__(self, name: str) -> Any:
        if name == "base_dataloader":
            raise AttributeError(name)
        return getattr(self.base_dataloader, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.base_dataloader)

    def __len__(self) -> int:
        return len(self.base_dataloader)

    def state_dict(self) -> dict[str, Any]:
        return self.dl_state_dict

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base_dataloader.load_state_dict(state_dict)

    def _update_state_dict(self) -> None:
        # a stateful loader's position, taken where a batch was handed to the user
        if hasattr(self.base_dataloader, "state_dict"):
            self.dl_state_dict = self.base_dataloader.state_dict()

    @property
    def __class__(self) -> type:  # type: ignore[override]
        # `isinstance(prepared, DataLoader)` holds, as for the loader it wraps
        return self.base_dataloader.__class__


# ----------------------------------------------------------------------- prepare


def get_sampler(dataloader: DataLoader) -> Any:
    """The sampler of indices behind ``dataloader`` (inside its batch sampler, if any)."""
    if isinstance(dataloader.sampler, BatchSampler):
        return dataloader.sampler.sampler
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    return getattr(batch_sampler, "sampler", None) if batch_sampler is not None else dataloader.sampler


def _base_seed(sampler: Any, data_seed: int | None) -> int:
    if data_seed is not None:
        return int(data_seed)
    if isinstance(sampler, SeedableRandomSampler):
        # its own seed orders it, whatever generator it reseeds
        return int(sampler.initial_seed)
    generator = getattr(sampler, "generator", None)
    if isinstance(generator, torch.Generator):
        return generator.initial_seed()
    return torch.initial_seed()


class _Shuffling:
    """How the prepared loader's samplers shuffle; collects the generators the pass seeds.

    ``draws`` (set when each process reads its own batches) makes the main sampler draw as torch's
    does under a plain loader: see :mod:`.draws`. Other generators (a custom batch sampler's) are
    private and seeded with ``seed + epoch``.
    """

    def __init__(self, use_seedable_sampler: bool, seed: int, draws: EpochDraws | None, num_processes: int) -> None:
        self.use_seedable_sampler = use_seedable_sampler
        self.seed = seed
        self.draws = draws
        self.num_processes = num_processes
        self.generators: list[torch.Generator] = []
        self.seedable: list[SeedableRandomSampler] = []
        self.synchronized: torch.Generator | None = None

    def sampler(self, sampler: Any) -> Any:
        """A copy of ``sampler`` that shuffles as the loader decides."""
        if self.use_seedable_sampler and type(sampler) is RandomSampler:
            replacement = SeedableRandomSampler(data_source=sampler.data_source, replacement=sampler.replacement,
                                                num_samples=sampler._num_samples, data_seed=self.seed)
            self.seedable.append(replacement)
            return replacement
        if isinstance(sampler, SeedableRandomSampler):
            self.seedable.append(sampler)
            return sampler
        if not hasattr(sampler, "generator"):
            return sampler
        replacement = copy.copy(sampler)
        draws = self.draws
        if draws is not None and (sampler.generator is not None or self.num_processes > 1):
            if sampler.generator is None:
                # several processes: one generator for the whole run, seeded now from the global
                # one and handed from process 0 to the others at every pass
                replacement.generator = torch.Generator()
                replacement.generator.manual_seed(draw_int64(None))
            draws.persistent.append(replacement.generator)
            if self.num_processes > 1 and not self.use_seedable_sampler:
                self.synchronized = replacement.generator
            return replacement
        replacement.generator = torch.Generator()
        if draws is not None and isinstance(sampler, RandomSampler):
            draws.per_pass.append(replacement.generator)  # seeded from the global generator at each pass
        else:
            self.generators.append(replacement.generator)
        return replacement

    def batch_sampler(self, batch_sampler: Any) -> Any:
        if type(batch_sampler) is BatchSampler:
            return BatchSampler(self.sampler(batch_sampler.sampler), batch_sampler.batch_size, batch_sampler.drop_last)
        rebuilt = batch_sampler
        if hasattr(batch_sampler, "generator") or hasattr(getattr(batch_sampler, "sampler", None), "generator"):
            rebuilt = copy.copy(batch_sampler)
            if hasattr(rebuilt, "generator"):
                rebuilt.generator = torch.Generator()
                self.generators.append(rebuilt.generator)
            if hasattr(getattr(rebuilt, "sampler", None), "generator"):
                rebuilt.sampler = self.sampler(rebuilt.sampler)
        return rebuilt


def prepare_data_loader(
    dataloader: DataLoader,
    device: Any = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: list[str] | None = None,
    dispatch_batches: bool | None = None,
    even_batches: bool = True,
    slice_fn_for_dispatch: Callable | None = None,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_stateful_dataloader: bool = False,
    torch_device_mesh: Any = None,
) -> DataLoader:
    """A loader that yields only this process's share of ``dataloader``'s data.

    Args:
        dataloader: the loader to split; every process must build the same one.
        device: where batches go when ``put_on_device``.
        num_processes: how many processes share the data (default: the run's).
        process_index: this process's index (default: the run's).
        split_batches: cut each batch of ``dataloader`` across the processes (the observed
            batch size stays the same; it must be a multiple of ``num_processes``), instead of
            giving each process whole batches (the observed batch size is multiplied by
            ``num_processes``).
        put_on_device: move batches (nested lists, tuples and dicts of tensors) to ``device``.
        rng_types: generators synchronised from process 0 at the start of each pass:
            ``"torch"``, ``"generator"`` (an iterable dataset's ``generator``) or the
            platform's name.
        dispatch_batches: the main process reads and sends out every batch. Default: on for
            an iterable dataset whose batches go to a device, off otherwise.
        even_batches: complete the last batches with samples from the start so every
            process gets as many batches of the same size (``gather_for_metrics`` drops the
            repeated samples again); off: some processes get fewer.
        slice_fn_for_dispatch: how a dispatched batch is cut (see :class:`DataLoaderDispatcher`).
        use_seedable_sampler: replace a ``RandomSampler`` with a :class:`SeedableRandomSampler`.
        data_seed: the shuffling seed (default: a ``SeedableRandomSampler``'s own seed, else the
            initial seed of the loader's generator, or of torch).
        non_blocking: asynchronous copies to the device.
        use_stateful_dataloader: the prepared loader is a torchdata ``StatefulDataLoader`` and
            its ``state_dict`` torchdata's (without it, every prepared loader still saves and
            restores its position, in drivetrain's own format).
        torch_device_mesh: a ``DeviceMesh`` of the run's processes: when ``num_processes`` and
            ``process_index`` are not given, the share is this process's place among the
            mesh's data-parallel dimensions (named ``dp...``), so tensor- and context-parallel
            peers read the same batches. Dispatching (``dispatch_batches``) is by process and
            refuses a mesh with model-parallel dimensions.
    """
    if dispatch_batches is None:
        dispatch_batches = bool(put_on_device) and isinstance(dataloader.dataset, IterableDataset)
    if dispatch_batches and not put_on_device:
        raise ConfigError("dispatch_batches=True sends batches to the processes' devices and needs "
                          "put_on_device=True (or set dispatch_batches=False)")
    if torch_device_mesh is not None:
        if dispatch_batches and shares_batches_across_peers(torch_device_mesh):
            raise ConfigError("dispatch_batches=True sends each process its own slice, which model-parallel peers of "
                              "torch_device_mesh cannot share; pass dispatch_batches=False")
        if num_processes is None and process_index is None:
            process_index, num_processes = data_parallel_share(torch_device_mesh)
    if num_processes is None or process_index is None:
        state = PartialState()
        num_processes = state.num_processes if num_processes is None else num_processes
        process_index = state.process_index if process_index is None else process_index
    dataset = dataloader.dataset
    iterable = isinstance(dataset, IterableDataset)
    batch_size = dataloader.batch_size
    if batch_size is None and dataloader.batch_sampler is not None:
        batch_size = getattr(dataloader.batch_sampler, "batch_size", None)
    if isinstance(dataloader.sampler, BatchSampler):
        batch_size = dataloader.sampler.batch_size
    if split_batches and batch_size is not None and batch_size % num_processes != 0:
        raise ConfigError(f"split_batches=True needs a batch size that is a multiple of the number of processes; "
                          f"got batch size {batch_size} for {num_processes} processes")

    arguments = _loader_arguments(dataloader)
    arguments["torch_device_mesh"] = torch_device_mesh  # kept by the prepared loader, as Accelerate's is
    placement = device if put_on_device else None
    sampler = get_sampler(dataloader)
    seed = _base_seed(sampler, data_seed)
    followers: list[Any] = [dataset] if hasattr(dataset, "set_epoch") else []

    if iterable:
        progress = _Progress(seed, num_processes, process_index, [], [], followers, agree_on_seed=False,
                             draws=None if dispatch_batches else EpochDraws(dataloader.generator))
        synchronized = getattr(dataset, "generator", None)
        if dispatch_batches:
            return DataLoaderDispatcher(
                dataset, split_batches=split_batches, use_stateful_dataloader=use_stateful_dataloader,
                _drop_last=dataloader.drop_last, _non_blocking=non_blocking, slice_fn=slice_fn_for_dispatch,
                device=placement, even_batches=even_batches, _progress=progress, batch_size=dataloader.batch_size,
                drop_last=dataloader.drop_last, **arguments)
        shard_dataset = dataset
        per_process = batch_size
        if num_processes > 1:
            shard_dataset = IterableDatasetShard(dataset, batch_size=batch_size or 1, drop_last=dataloader.drop_last,
                                                 num_processes=num_processes, process_index=process_index,
                                                 split_batches=split_batches, even_batches=even_batches)
            progress.epoch_followers = [shard_dataset]
            if batch_size is not None and split_batches:
                per_process = batch_size // num_processes
        return DataLoaderShard(
            shard_dataset, device=placement, rng_types=rng_types,
            synchronized_generator=synchronized if isinstance(synchronized, torch.Generator) else None,
            use_stateful_dataloader=use_stateful_dataloader, _drop_last=dataloader.drop_last,
            _non_blocking=non_blocking, _progress=progress, batch_size=per_process, drop_last=dataloader.drop_last,
            **arguments)

    # Map-style dataset: shard the batch sampler.
    sampler_is_batch_sampler = isinstance(dataloader.sampler, BatchSampler)
    unbatched = dataloader.batch_sampler is None and not sampler_is_batch_sampler
    draws = None if dispatch_batches else EpochDraws(dataloader.generator)
    # Every process of the job must draw one order, not only the data-parallel shards: model-parallel
    # peers (a mesh whose data-parallel size is 1) read the same batches, seeded apart or not.
    sharing = max(num_processes, PartialState().num_processes)
    shuffling = _Shuffling(use_seedable_sampler, seed, draws, sharing)
    if sampler_is_batch_sampler:
        inner = shuffling.batch_sampler(dataloader.sampler)
    elif unbatched:
        inner = BatchSampler(shuffling.sampler(dataloader.sampler), 1, False)
    else:
        inner = shuffling.batch_sampler(dataloader.batch_sampler)
    generators, seedable = shuffling.generators, shuffling.seedable
    # the rebuilt batch sampler and the user's own (a custom one reads its epoch when iterated)
    for part in epoch_followers(None, dataloader.sampler, dataloader.batch_sampler) + epoch_followers(None, None, inner):
        if not isinstance(part, SeedableRandomSampler) and not any(part is seen for seen in followers):
            followers.append(part)
    progress = _Progress(seed, num_processes, process_index, generators, seedable, followers,
                         agree_on_seed=not dispatch_batches and bool(generators or seedable), draws=draws)
    shards = 1 if dispatch_batches else num_processes
    shard = BatchSamplerShard(inner, num_processes=shards, process_index=0 if dispatch_batches else process_index,
                              split_batches=split_batches and not dispatch_batches,
                              even_batches=even_batches)
    if sampler_is_batch_sampler:
        sampling = {"sampler": shard, "batch_size": None}
    elif unbatched:
        sampling = {"sampler": _Unbatched(shard), "batch_size": None}
    else:
        sampling = {"batch_sampler": shard}
    if dispatch_batches:
        return DataLoaderDispatcher(
            dataset, split_batches=split_batches, use_stateful_dataloader=use_stateful_dataloader,
            _drop_last=dataloader.drop_last or bool(getattr(inner, "drop_last", False)), _non_blocking=non_blocking,
            slice_fn=slice_fn_for_dispatch, device=placement, even_batches=even_batches, _progress=progress,
            _shard_sampler=shard, **sampling, **arguments)
    if shuffling.synchronized is not None and "generator" not in [str(t) for t in rng_types or ()]:
        # the shards must come from one order even when the processes were seeded apart; when
        # they agree already, handing process 0's state over changes nothing
        rng_types = [*(rng_types or ()), "generator"]
    return DataLoaderShard(
        dataset, device=placement, rng_types=rng_types, synchronized_generator=shuffling.synchronized,
        use_stateful_dataloader=use_stateful_dataloader, _drop_last=dataloader.drop_last, _non_blocking=non_blocking,
        _progress=progress, _shard_sampler=shard, **sampling, **arguments)


def skip_first_batches(dataloader: DataLoader, num_batches: int = 0) -> DataLoader:
    """A loader like ``dataloader`` that leaves out its first ``num_batches`` batches.

    For a prepared loader, the new one shares the original's position and shuffling: it plays
    the epoch the original would play next (the restored one after ``load_state_dict``,
    whose own offset it replaces) from batch ``num_batches`` on, without loading the skipped
    batches of a map-style dataset; once it has run through, the original continues with the
    following epoch. A plain ``DataLoader`` gets a plain loader that skips at every pass.
    """
    if not isinstance(num_batches, numbers.Integral) or isinstance(num_batches, bool) or num_batches < 0:
        raise ConfigError(f"skip_first_batches(num_batches={num_batches!r}) takes a whole number of batches >= 0")
    num_batches = int(num_batches)
    if isinstance(dataloader, _PreparedLoader):
        construction = dict(dataloader._construction)
        return type(dataloader)(skip_batches=num_batches, **construction)
    dataset = dataloader.dataset
    arguments = _loader_arguments(dataloader)
    arguments["generator"] = dataloader.generator
    if isinstance(dataset, IterableDataset) or dataloader.batch_sampler is None:
        return SkipDataLoader(dataset, skip_batches=num_batches, batch_size=dataloader.batch_size,
                              sampler=None if isinstance(dataset, IterableDataset) else dataloader.sampler,
                              drop_last=dataloader.drop_last, **arguments)
    return DataLoader(dataset, batch_sampler=SkipBatchSampler(dataloader.batch_sampler, skip_batches=num_batches),
                      **arguments)
