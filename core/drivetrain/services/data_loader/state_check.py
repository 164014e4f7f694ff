"""A saved data loader state checked by kind, type and range before a loader takes it.

``load_state`` checks every part of a checkpoint before it changes anything: a loader state
of another kind (torchdata's ``StatefulDataLoader`` state for a plain prepared loader, or
the other way round), a damaged value (``seed: "abc"``, ``epoch: -1``,
``num_processes: "two"``) or a position past the end of this loader's epoch must fail there,
with one line naming the field, not halfway through the restore.
"""

from __future__ import annotations

import numbers
from typing import Any, Mapping

from ...kernel.errors import ConfigError

POSITION_FIELDS = ("epoch", "batches_yielded", "seed")
_SEED_RANGE = (-(2 ** 63), 2 ** 64)  # what torch.Generator.manual_seed takes


def _is_integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _wrong(field: str, value: Any, wanted: str) -> ConfigError:
    return ConfigError(f"its {field} is {value!r:.60}, where {wanted} belongs; the state is damaged, load an "
                       "earlier checkpoint")


def check_stateful_state(state: Any) -> None:
    """torchdata's ``StatefulDataLoader`` state, for a loader prepared with ``use_stateful_dataloader``."""
    if not isinstance(state, Mapping):
        raise ConfigError(f"a {type(state).__name__} is not a StatefulDataLoader state")
    if any(name in state for name in POSITION_FIELDS):
        raise ConfigError("it is a drivetrain data loader position and this loader is a StatefulDataLoader "
                          "(use_stateful_dataloader=True): prepare the loader as the saving run did")
    for name in ("_num_yielded", "_sampler_iter_yielded"):
        if name in state and (not _is_integer(state[name]) or state[name] < 0):
            raise _wrong(name, state[name], "a count (an integer >= 0)")


def check_position_state(state: Any, format_read: int) -> None:
    """A drivetrain loader position: every field of the type and in the range it is written with."""
    if not isinstance(state, Mapping):
        raise ConfigError(f"a {type(state).__name__} is not a data loader state")
    missing = [name for name in POSITION_FIELDS if name not in state]
    if missing:
        kind = ("a torchdata StatefulDataLoader's state (prepare the loader with use_stateful_dataloader=True, as "
                "the saving run did)" if "_num_yielded" in state else "saved by another kind of data loader")
        raise ConfigError(f"not a drivetrain data loader state (missing {missing}): {kind}")
    version = state.get("format", format_read)
    if not _is_integer(version) or version < 1:
        raise _wrong("format", version, "a format number")
    if version > format_read:
        raise ConfigError(f"this data loader state has format {version}, newer than this drivetrain reads "
                          f"({format_read}); upgrade drivetrain")
    for name in ("epoch", "batches_yielded"):
        if not _is_integer(state[name]) or state[name] < 0:
            raise _wrong(name, state[name], "a count (an integer >= 0)")
    seed = state["seed"]
    if not _is_integer(seed) or not _SEED_RANGE[0] <= seed < _SEED_RANGE[1]:
        raise _wrong("seed", seed, "a 64-bit integer")
    if state.get("samples_yielded") is not None and (not _is_integer(state["samples_yielded"])
                                                     or state["samples_yielded"] < 0):
        raise _wrong("samples_yielded", state["samples_yielded"], "a count (an integer >= 0)")
    if state.get("dataset_length") is not None and (not _is_integer(state["dataset_length"])
                                                    or state["dataset_length"] < 0):
        raise _wrong("dataset_length", state["dataset_length"], "a number of samples")
    for name in ("total_batch_size", "num_processes"):
        if state.get(name) is not None and (not _is_integer(state[name]) or state[name] < 1):
            raise _wrong(name, state[name], "a positive integer")
    draws = state.get("draws")
    if draws is not None and (not isinstance(draws, Mapping) or not _is_integer(draws.get("epoch"))
                              or draws["epoch"] < 0):
        raise _wrong("draws", draws, "the draws of an epoch")


def resumed_batches(state: Mapping[str, Any], total_batch_size: int | None) -> tuple[int, int | None]:
    """The batches of its epoch a checked position leaves out on a loader of ``total_batch_size``
    samples per step, and the samples seen (``None``: not recorded)."""
    batches = int(state["batches_yielded"])
    saved_total = state.get("total_batch_size")
    samples = state.get("samples_yielded")
    samples = int(samples) if samples else batches * saved_total if saved_total else None
    if samples is not None and total_batch_size and saved_total != total_batch_size:
        batches = samples // total_batch_size
    return batches, samples


def check_within_epoch(batches: int, per_epoch: int | None, epoch: int) -> None:
    """A position no further than the end of this loader's epoch (``per_epoch`` batches)."""
    if per_epoch is not None and batches > per_epoch:
        raise ConfigError(f"its position (batch {batches} of epoch {epoch}) lies past the end of this loader's epoch "
                          f"({per_epoch} batches): it was saved over a larger dataset or with smaller batches; load it "
                          "into a loader over the same data and batch size")


def check_same_dataset(state: Mapping[str, Any], length: int | None) -> None:
    """A position mid-epoch over a dataset of another length would skip samples it never saw."""
    saved = state.get("dataset_length")
    if saved is None or length is None or saved == length or not state["batches_yielded"]:
        return
    raise ConfigError(f"its position (batch {state['batches_yielded']} of epoch {state['epoch']}) was saved over "
                      f"{saved} samples and this loader has {length}: resume over the same dataset, or from a "
                      "checkpoint saved at an epoch boundary")
