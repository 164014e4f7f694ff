"""The random numbers a pass of a prepared loader draws, in torch's order, and their replay.

A plain ``DataLoader`` draws from torch's generators when a pass starts: its iterator takes one
64-bit "base seed" (for its workers) from the loader's ``generator``, or from the global
generator when it has none; then a ``RandomSampler`` without a generator takes one more number
from the global generator to seed the pass's permutation, while one with a generator draws the
permutation from it and leaves it advanced. A script that calls ``set_seed`` and trains
therefore sees a global generator that the loader moved on, and dropout masks that depend on it.

:class:`EpochDraws` makes a prepared loader consume exactly those numbers from exactly those
generators, so the same seed gives the same batch order and the same masks as the plain loader
(and as Accelerate, which keeps the plain loader's draws), and it records the state the pass
started from. A checkpoint carries that record; a resumed pass replays it from private copies,
so it gets the same order without touching the global generator, which the run's restored
random states already hold where the saved run left it.
"""

from __future__ import annotations

from typing import Any

import torch

from ...kernel.errors import ConfigError


def draw_int64(generator: torch.Generator | None) -> int:
    """One number as a ``DataLoader`` or ``RandomSampler`` takes it (``None``: the global generator)."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


class EpochDraws:
    """The generators one prepared loader draws from at the start of each pass.

    Args:
        loader_source: the user's ``DataLoader(generator=...)``; ``None``: the global generator.

    ``per_pass`` generators stand for a ``RandomSampler`` without a generator on one process:
    each pass seeds them with a number from the global generator. ``persistent`` ones (the
    user's sampler generator, or one seeded from the global generator when the loader was
    prepared for several processes) carry on from pass to pass.
    """

    def __init__(self, loader_source: torch.Generator | None) -> None:
        self.loader_source = loader_source
        self.per_pass: list[torch.Generator] = []
        self.persistent: list[torch.Generator] = []
        self.record: dict[str, Any] | None = None

    def _samplers(self) -> list[torch.Generator]:
        return self.per_pass + self.persistent

    def begin(self, epoch: int, loader_generator: torch.Generator | None) -> None:
        """Draw (or, after a restore, replay) the numbers of the pass of ``epoch``.

        ``loader_generator`` is the private generator the loader was built with; it is given the
        state the base seed comes from, and the real source moves on by that one draw. ``None``:
        no base seed is drawn here (the loader keeps its iterator, or draws from the user's
        generator itself).
        """
        record = self.record
        samplers = self._samplers()
        if record is not None and record.get("replay") and record["epoch"] == epoch:
            if loader_generator is not None:
                loader_generator.set_state(record["loader"])
            for generator, state in zip(samplers, record["samplers"]):
                generator.set_state(state)
            record["replay"] = False
            return
        source = self.loader_source if self.loader_source is not None else torch.default_generator
        start = source.get_state()
        if loader_generator is not None:
            loader_generator.set_state(start)
            draw_int64(self.loader_source)
        for generator in self.per_pass:
            generator.manual_seed(draw_int64(None))
        self.record = {"epoch": epoch, "loader": start, "samplers": [g.get_state() for g in samplers]}

    def state_dict(self) -> dict[str, Any] | None:
        if self.record is None:
            return None
        return {"epoch": self.record["epoch"], "loader": self.record["loader"].clone(),
                "samplers": [state.clone() for state in self.record["samplers"]]}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Replay ``state`` at the next pass of its epoch (``None``: draw afresh)."""
        self.record = self.checked_record(state)

    def checked_record(self, state: dict[str, Any] | None) -> dict[str, Any] | None:
        """What :meth:`load_state_dict` would keep of ``state``, changing nothing; a state it
        cannot replay is a ``ConfigError`` (checked before any part of a checkpoint is restored)."""
        if not state:
            return None
        samplers = list(state.get("samplers", []))
        if len(samplers) != len(self._samplers()):
            return None  # a loader of another shape: its draws do not apply
        try:
            record = {"epoch": int(state["epoch"]), "loader": _byte_state(state["loader"]),
                      "samplers": [_byte_state(s) for s in samplers], "replay": True}
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise ConfigError(f"its draws are damaged ({type(error).__name__}: {error}); resume from an earlier "
                              "checkpoint") from None
        for saved in [record["loader"], *record["samplers"]]:
            try:
                torch.Generator().set_state(saved)
            except RuntimeError as error:
                raise ConfigError(f"this data loader state holds a generator state this torch cannot use ({error}); "
                                  "it was saved by another torch build: resume from an epoch boundary") from None
        return record


def _byte_state(value: Any) -> torch.Tensor:
    return torch.as_tensor(value, dtype=torch.uint8).detach().cpu().contiguous()
