"""The values inside a checkpoint, checked by type and range before anything is restored.

A checksum proves a file is the one that was written, not that what was written is sane: a
forger re-records the checksum, and Accelerate's layout has none. Generators are the
dangerous case: numpy takes an MT19937 state whose position lies past its key and its first
draw then reads outside the generator (the process dies), Python's ``random`` fails with a
raw ``OverflowError`` on a word of 2**70. Each check here raises a one-line
:class:`CheckpointError` naming the file and the field, so a damaged value is refused
before the first object changes.
"""

from __future__ import annotations

import numbers
from typing import Any, Mapping

import numpy as np

from ...kernel.errors import CheckpointError

_MT_WORDS = 624  # the key of a Mersenne Twister, in 32-bit words (Python's and numpy's)
_WORD = 2 ** 32


def is_integer(value: Any) -> bool:
    """An int (numpy's too), never a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _damaged(where: str, field: str, value: Any, wanted: str) -> CheckpointError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return CheckpointError(f"{where} is damaged: {field} is {shown}, where {wanted} belongs; load an earlier "
                           "checkpoint")


def check_python_rng(state: Any, where: str) -> None:
    """``random.getstate()``'s shape: ``(3, 625 words, gauss)``, words below 2**32, position <= 624."""
    if not isinstance(state, (list, tuple)) or len(state) != 3:
        raise _damaged(where, "the Python random state", state, "a (version, words, gauss) triple")
    version, words, gauss = state
    if version != 3 or not is_integer(version):
        raise _damaged(where, "the Python random state's version", version, "3")
    if not isinstance(words, (list, tuple)) or len(words) != _MT_WORDS + 1:
        raise _damaged(where, "the Python random state's words", f"{type(words).__name__} of "
                       f"{len(words) if isinstance(words, (list, tuple)) else '?'}", f"{_MT_WORDS + 1} integers")
    for index, word in enumerate(words[:_MT_WORDS]):
        if not is_integer(word) or not 0 <= word < _WORD:
            raise _damaged(where, f"the Python random state's word {index}", word, "an integer in [0, 2**32)")
    position = words[_MT_WORDS]
    if not is_integer(position) or not 0 <= position <= _MT_WORDS:
        raise _damaged(where, "the Python random state's position", position, f"an integer in [0, {_MT_WORDS}]")
    if gauss is not None and not isinstance(gauss, float):
        raise _damaged(where, "the Python random state's gauss", gauss, "None or a float")


def check_numpy_rng(state: Any, where: str) -> None:
    """``np.random.get_state()``'s shape: ``("MT19937", 624 uint32 words, pos <= 624, has_gauss, cached)``."""
    if isinstance(state, Mapping):  # get_state(legacy=False)
        inner = state.get("state") if isinstance(state.get("state"), Mapping) else {}
        state = (state.get("bit_generator"), inner.get("key"), inner.get("pos"), state.get("has_gauss"),
                 state.get("gauss"))
    if not isinstance(state, (list, tuple)) or len(state) != 5:
        raise _damaged(where, "the numpy random state", state, "a 5-tuple from np.random.get_state()")
    name, key, position, has_gauss, cached = state
    if name != "MT19937":
        raise _damaged(where, "the numpy random state's generator", name, "'MT19937'")
    if (not isinstance(key, np.ndarray) or key.shape != (_MT_WORDS,) or key.dtype.kind not in "iu"
            or (key.size and (int(key.min()) < 0 or int(key.max()) >= _WORD))):
        shown = f"{key.dtype} array of shape {key.shape}" if isinstance(key, np.ndarray) else type(key).__name__
        raise _damaged(where, "the numpy random state's key", shown, f"{_MT_WORDS} uint32 words")
    if not is_integer(position) or not 0 <= position <= _MT_WORDS:
        raise _damaged(where, "the numpy random state's pos", position, f"an integer in [0, {_MT_WORDS}]")
    if not is_integer(has_gauss) or has_gauss not in (0, 1):
        raise _damaged(where, "the numpy random state's has_gauss", has_gauss, "0 or 1")
    if not isinstance(cached, numbers.Real) or isinstance(cached, bool):
        raise _damaged(where, "the numpy random state's cached gaussian", cached, "a float")


def check_run_values(saved: Any, where: str) -> None:
    """The accelerator's own counters: ``step`` and ``iteration`` counts, ``sync_gradients`` a bool."""
    if not isinstance(saved, Mapping):
        raise _damaged(where, "the accelerator state", saved, "a mapping")
    for name in ("step", "iteration"):
        if name in saved and (not is_integer(saved[name]) or saved[name] < 0):
            raise _damaged(where, name, saved[name], "a count (an integer >= 0)")
    if "sync_gradients" in saved and not isinstance(saved["sync_gradients"], bool):
        raise _damaged(where, "sync_gradients", saved["sync_gradients"], "a bool")
