"""Uneven inputs across processes: ``Accelerator.join_uneven_inputs`` and ``even_batches``.

Processes with fewer batches shadow the collectives of the others through torch's ``Join``
while the block runs; ``even_batches`` changes on the prepared loaders for that time only.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

from ..kernel.errors import UsageError


def set_even_batches(dataloader_config: Any, dataloaders: Sequence[Any], value: bool) -> None:
    """Set ``even_batches`` on the configuration and on every prepared loader's batch sampler."""
    dataloader_config.even_batches = value
    for loader in dataloaders:
        sampler = getattr(loader, "batch_sampler", None)
        if hasattr(sampler, "even_batches"):
            sampler.even_batches = value


@contextlib.contextmanager
def join_uneven_inputs(accelerator: Any, joinables: Sequence[Any], even_batches: bool | None) -> Iterator[None]:
    """Let processes with fewer batches shadow the collectives of the others (torch's Join)."""
    if accelerator.num_processes == 1:
        yield
        return
    from torch.distributed.algorithms.join import Join, Joinable

    config, loaders = accelerator.dataloader_config, accelerator._prepared.dataloaders
    saved = config.even_batches
    if even_batches is not None:
        set_even_batches(config, loaders, even_batches)
    if not all(isinstance(j, Joinable) for j in joinables):
        raise UsageError("join_uneven_inputs needs models prepared with a data-parallel strategy (torch Joinable)")
    try:
        with Join(list(joinables)):
            yield
    finally:
        set_even_batches(config, loaders, saved)
