"""The device loader of an XLA run: torch_xla's ``MpDeviceLoader`` over the prepared loader.

``MpDeviceLoader`` reads batches on a background thread, copies them to the device ahead of
use and cuts the lazy graph at each batch it hands out, so one step is one graph. The
prepared loader it reads keeps its sharding, resume position and epoch; three things of it
must stay on the training thread and in the training order, and this wrapper sees to them:

- the start of a pass (synchronising generators across processes, a collective) runs before
  the background thread starts;
- ``end_of_dataloader`` is this wrapper's, true when the last batch is *handed to the user*
  (the background thread reaches the end several batches earlier);
- the position saved by ``save_state`` counts batches handed to the user, not batches
  prefetched.
"""

from __future__ import annotations

from typing import Any, Iterator

from drivetrain.plugin_api import GradientState


class _PrimedPass:
    """One pass of the prepared loader whose first batch was already read (on the training
    thread), for ``MpDeviceLoader`` to iterate."""

    def __init__(self, first: Any, rest: Iterator[Any], length: int) -> None:
        self._first, self._rest, self._length = first, rest, length

    def __iter__(self) -> Iterator[Any]:
        yield self._first
        yield from self._rest

    def __len__(self) -> int:
        return self._length


class XlaDeviceLoader:
    """A prepared data loader whose batches reach the XLA device through ``MpDeviceLoader``.

    Attributes not defined here (``dataset``, ``batch_size``, ``set_epoch``, ``batch_sampler``,
    ``total_batch_size``, ...) are the prepared loader's.
    """

    def __init__(self, loader: Any, device: Any, **parallel_loader_kwargs: Any) -> None:
        self._loader = loader
        self._device = device
        self._kwargs = parallel_loader_kwargs
        # The background thread transfers batches itself: the prepared loader yields host batches.
        if getattr(loader, "device", None) is not None:
            loader.device = None
        self.gradient_state = GradientState()
        self.end_of_dataloader = False
        self.batches_yielded = 0
        self._start_position = 0

    @property
    def base_loader(self) -> Any:
        """The prepared loader this one reads."""
        return self._loader

    @property
    def remainder(self) -> int:
        return getattr(self._loader, "remainder", -1)

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_loader":
            raise AttributeError(name)
        return getattr(self._loader, name)

    def __iter__(self) -> Iterator[Any]:
        from torch_xla.distributed.parallel_loader import MpDeviceLoader

        self.end_of_dataloader = False
        passing = iter(self._loader)
        try:
            first = next(passing)  # starts the pass here: generator sync, position, GradientState
        except StopIteration:
            self.end_of_dataloader = True
            return
        progress = getattr(self._loader, "_progress", None)
        self._start_position = (progress.batches_yielded - 1) if progress is not None else 0
        self.batches_yielded = self._start_position
        self.gradient_state._add_dataloader(self)  # after the prepared loader's own registration
        device_batches = iter(MpDeviceLoader(_PrimedPass(first, passing, len(self._loader)), self._device,
                                             **self._kwargs))
        try:
            current = next(device_batches, _END)
            while current is not _END:
                upcoming = next(device_batches, _END)
                self.end_of_dataloader = upcoming is _END
                self.batches_yielded += 1
                yield current
                current = upcoming
        finally:
            # A pass left early leaves the background thread to finish its prefetch; the
            # prepared loader's own pass ends with it.
            self.gradient_state._remove_dataloader(self)

    def state_dict(self) -> dict[str, Any]:
        state = dict(self._loader.state_dict())
        if self.gradient_state.active_dataloader is self:  # mid-pass: what the user has seen
            state["batches_yielded"] = self.batches_yielded
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._loader.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return f"XlaDeviceLoader({self._loader!r}, device={self._device})"


_END = object()


def wrap_dataloader(dataloader: Any, device: Any) -> XlaDeviceLoader | None:
    """The device loader for a prepared loader on ``device`` (``None`` for what is not one)."""
    if isinstance(dataloader, XlaDeviceLoader) or getattr(device, "type", None) != "xla":
        return None
    return XlaDeviceLoader(dataloader, device)
