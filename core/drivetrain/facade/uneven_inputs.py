"""Uneven inputs across processes: ``Accelerator.join_uneven_inputs`` and ``even_batches``.

Processes with fewer batches shadow the collectives of the others through torch's ``Join``
while the block runs; ``even_batches`` changes on the prepared loaders for that time only.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator, Sequence

from ..kernel.errors import UsageError
from ..kernel.plugin_manager import get_plugin_manager
from ..selection.choice import platform_for_distributed_type


def _joins_data_parallel(distributed_type: Any) -> bool:
    """Whether torch's Join applies: the run is data parallel on a platform (its distributed
    type is a platform's, such as ``MULTI_CPU``), not one a strategy names."""
    return platform_for_distributed_type(get_plugin_manager(), str(distributed_type.value)) is not None


def set_even_batches(dataloader_config: Any, dataloaders: Sequence[Any], value: bool) -> bool:
    """Set ``even_batches`` on the configuration and on every prepared loader's batch sampler.

    Returns whether some loader had no such sampler (an iterable dataset's), which the value
    cannot reach.
    """
    dataloader_config.even_batches = value
    unreached = False
    for loader in dataloaders:
        sampler = getattr(loader, "batch_sampler", None)
        if hasattr(sampler, "even_batches"):
            sampler.even_batches = value
        else:
            unreached = True
    return unreached


@contextlib.contextmanager
def join_uneven_inputs(accelerator: Any, joinables: Sequence[Any], even_batches: bool | None) -> Iterator[None]:
    """Let processes with fewer batches shadow the collectives of the others (torch's Join)."""
    if accelerator.num_processes == 1:
        yield
        return
    from torch.distributed.algorithms.join import Join, Joinable

    if not _joins_data_parallel(accelerator.distributed_type):
        # As Accelerate: under a sharding or pipeline strategy the block runs unchanged.
        warnings.warn("Joining uneven inputs is only supported for multi-GPU training, as a result "
                      "`join_uneven_inputs` will have no effect.", UserWarning, stacklevel=3)
        yield
        return
    config, loaders = accelerator.dataloader_config, accelerator._prepared.dataloaders
    saved = config.even_batches
    if even_batches is not None and set_even_batches(config, loaders, even_batches):
        # Accelerate's words: scripts and tests match on them.
        warnings.warn("Overriding even_batches is only supported for map-style datasets, yet some "
                      "dataloaders given were iterable", UserWarning, stacklevel=3)
    if not all(isinstance(j, Joinable) for j in joinables):
        raise UsageError("join_uneven_inputs needs models prepared with a data-parallel strategy (torch Joinable)")
    try:
        with Join(list(joinables)):
            yield
    finally:
        set_even_batches(config, loaders, saved)
