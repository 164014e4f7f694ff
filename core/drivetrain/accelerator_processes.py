"""The ``Accelerator``'s process control and collectives: who runs a block, gathering and
reducing across processes, triggers and uneven inputs. Each is a call to the state or to
:mod:`drivetrain.utils.operations`."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

import torch

from .kernel.errors import UsageError


class AcceleratorProcesses:
    """Process control over ``self.state`` and the run's collectives."""

    state: Any
    device: Any
    num_processes: int
    dataloader_config: Any
    flag_tensor: Any
    _dataloaders: list[Any]

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
        from .services.cross_process import gather

        return gather(tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        from .services.cross_process import gather_for_metrics

        return gather_for_metrics(input_data, use_gather_object=use_gather_object)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        from .services.cross_process import reduce

        return reduce(tensor, reduction=reduction, scale=scale)

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
        from .services.cross_process import pad_across_processes

        return pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)

    def set_trigger(self) -> None:
        """Raise a flag on this process that :meth:`check_trigger` sees on every process."""
        self.flag_tensor = torch.tensor(1, device=self.device)

    def check_trigger(self) -> bool:
        """Whether any process called :meth:`set_trigger` since the last check (collective)."""
        flag = self.flag_tensor if self.flag_tensor is not None else torch.tensor(0, device=self.device)
        total = self.state.collectives.all_reduce(flag.clone(), "sum")
        if int(total.item()) >= 1:
            self.flag_tensor = torch.tensor(0, device=self.device)
            return True
        return False

    @contextlib.contextmanager
    def join_uneven_inputs(self, joinables: Sequence[Any], even_batches: bool | None = None) -> Iterator[None]:
        """Let processes with fewer batches shadow the collectives of the others (torch's Join)."""
        if self.num_processes == 1:
            yield
            return
        from torch.distributed.algorithms.join import Join, Joinable

        saved = self.even_batches
        if even_batches is not None:
            self._set_even_batches(even_batches)
        if not all(isinstance(j, Joinable) for j in joinables):
            raise UsageError("join_uneven_inputs needs models prepared with a data-parallel strategy (torch Joinable)")
        try:
            with Join(list(joinables)):
                yield
        finally:
            self._set_even_batches(saved)

    def _set_even_batches(self, value: bool) -> None:
        self.dataloader_config.even_batches = value
        for loader in self._dataloaders:
            sampler = getattr(loader, "batch_sampler", None)
            if hasattr(sampler, "even_batches"):
                sampler.even_batches = value
