"""Checking that what a checkpoint holds fits the objects it is loaded into, before any is changed.

``load_state`` reads every file first, then checks each state against the object it is for
(shapes and dtypes of every tensor, optimizer parameter groups, RNG states), and only then
copies anything: a checkpoint written for another model raises a ``CheckpointError`` that
names the first mismatch and leaves every object as it was.
"""

from __future__ import annotations

import random
from typing import Any, Mapping

import numpy as np
import torch

from ...kernel.errors import CheckpointError
from .state_values import check_numpy_rng, check_python_rng, is_integer


def _describe(tensor: torch.Tensor) -> str:
    return f"{tuple(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')}"


def _fits(saved: torch.Tensor, current: torch.Tensor, casts: bool) -> bool:
    if saved.layout != current.layout:  # a sparse tensor's indices are not checked by torch: never into a dense one
        return False
    if tuple(saved.shape) != tuple(current.shape):
        return False
    if saved.dtype == current.dtype:
        return True
    # load_state_dict copies a floating tensor into another floating dtype (fp32 weights into a bf16 model)
    return casts and saved.is_floating_point() and current.is_floating_point()


def _refuse(where: str, name: str, saved: Any, current: Any) -> CheckpointError:
    def show(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            sparse = "" if value.layout == torch.strided else f" {str(value.layout).removeprefix('torch.')}"
            return _describe(value) + sparse
        return type(value).__name__

    return CheckpointError(f"{where} does not fit: {name} is {show(saved)} in the checkpoint but {show(current)} here; "
                           "load it into the same model and optimizer set-up that saved it")


def check_model(state: Mapping[str, Any], model: torch.nn.Module, where: str, strict: bool) -> None:
    """Shapes (and dtypes, up to floating casts) of ``state`` against ``model``; keys when ``strict``."""
    own = model.state_dict()
    if strict:
        missing = [key for key in own if key not in state]
        unexpected = [key for key in state if key not in own]
        if missing or unexpected:
            raise CheckpointError(f"{where} does not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}; "
                                  "load it into the model that saved it, or pass strict=False")
    for key, value in state.items():
        current = own.get(key)
        if isinstance(value, torch.Tensor) and isinstance(current, torch.Tensor) and not _fits(value, current, True):
            raise _refuse(where, key, value, current)


def check_optimizer(saved: Any, optimizer: Any, where: str) -> None:
    """Parameter groups, and each state tensor against the current state or its parameter."""
    inner = getattr(optimizer, "optimizer", optimizer)
    if not isinstance(saved, Mapping) or not isinstance(saved.get("param_groups"), list):
        raise CheckpointError(f"{where} is not an optimizer state (no param_groups)")
    groups = inner.param_groups
    if len(saved["param_groups"]) != len(groups):
        raise CheckpointError(f"{where} does not fit: {len(saved['param_groups'])} parameter groups in the checkpoint, "
                              f"{len(groups)} here; create the optimizer as the saving run did")
    for number, (theirs, ours) in enumerate(zip(saved["param_groups"], groups)):
        if not isinstance(theirs, Mapping) or not isinstance(theirs.get("params", []), list):
            raise CheckpointError(f"{where} is damaged: parameter group {number} is not a mapping with a list of "
                                  "params; load an earlier checkpoint")
        _check_group_values(theirs, ours, inner, f"{where}, parameter group {number}")
        if len(theirs.get("params", ())) != len(ours["params"]):
            raise CheckpointError(f"{where} does not fit: parameter group {number} has {len(theirs.get('params', ()))} "
                                  f"parameters in the checkpoint, {len(ours['params'])} here")
    parameters = [p for group in groups for p in group["params"]]
    index_of = {id_: position for position, id_ in
                enumerate(i for group in saved["param_groups"] for i in group.get("params", ()))}
    current_state = inner.state
    for key, entries in (saved.get("state") or {}).items():
        position = index_of.get(key)
        if position is None or not isinstance(entries, Mapping):
            raise CheckpointError(f"{where} holds state for parameter {key!r} that no parameter group lists; "
                                  "the checkpoint is damaged")
        parameter = parameters[position]
        ours = current_state.get(parameter, {})
        for name, value in entries.items():
            label = f"state[{key}][{name!r}]"
            current = ours.get(name)
            if not isinstance(value, torch.Tensor):
                # a number may stand for a tensor (an older torch's step count), nothing else may
                expected = 0.0 if isinstance(current, torch.Tensor) else current
                if not _same_kind_of_value(value, expected):
                    raise CheckpointError(f"{where} is damaged: {label} is {value!r:.60}, where the optimizer holds "
                                          f"a {type(current).__name__}; load an earlier checkpoint")
                continue
            if value.layout != torch.strided and not (isinstance(current, torch.Tensor)
                                                      and current.layout == value.layout):
                raise _refuse(where, label, value, current if current is not None else parameter)
            _check_sparse_indices(value, where, label)
            if isinstance(current, torch.Tensor):
                if not _fits(value, current, True):
                    raise _refuse(where, label, value, current)
            elif value.dim() > 0 and value.dim() == parameter.dim() and tuple(value.shape) != tuple(parameter.shape):
                raise _refuse(where, label, value, parameter)


def _check_sparse_indices(value: torch.Tensor, where: str, label: str) -> None:
    """torch.load does not check a sparse tensor's indices: one past its size reads outside it later."""
    if value.layout == torch.strided:
        return
    try:
        if value.layout != torch.sparse_coo:
            raise RuntimeError(f"a {value.layout} tensor")
        torch.sparse_coo_tensor(value._indices(), value._values(), value.shape, check_invariants=True)
    except RuntimeError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"{where} is damaged: {label} is a sparse tensor that cannot be used ({first[:120]}); "
                              "load an earlier checkpoint") from None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_scalar(value: Any) -> bool:
    """A number, or a one-element tensor (torch takes a tensor learning rate)."""
    return _is_number(value) or (isinstance(value, torch.Tensor) and value.numel() == 1)


def _fits_value(saved: Any, current: Any) -> bool:
    """Whether a saved hyperparameter has a type the optimizer can take where it holds ``current``."""
    if isinstance(current, bool):
        return isinstance(saved, bool)
    if _is_scalar(current):
        return _is_scalar(saved)
    if isinstance(current, str):
        return isinstance(saved, str)
    if isinstance(current, (list, tuple)):
        return isinstance(saved, (list, tuple)) and len(saved) == len(current) and all(map(_is_scalar, saved))
    # None or unknown to this optimizer (an option of another torch version, a scheduler's
    # initial_lr): plain values only, never a string the optimizer does not hold itself.
    return saved is None or isinstance(saved, bool) or _is_scalar(saved) or (
        isinstance(saved, (list, tuple)) and all(map(_is_scalar, saved)))


def _check_group_values(saved: Mapping[str, Any], current: Mapping[str, Any], optimizer: Any, where: str) -> None:
    """Each saved hyperparameter (``lr``, ``betas``, ...) must have the type the optimizer
    holds there: a number, a bool, ``None``, numbers in a list or tuple, a string only where
    the optimizer itself holds one. A forged ``"lr": "abc"`` is refused before anything
    loads instead of failing at the next ``step()``."""
    defaults = getattr(optimizer, "defaults", None) or {}
    for key, value in saved.items():
        if key == "params":
            continue
        own = current.get(key, defaults.get(key)) if isinstance(key, str) else None
        if not isinstance(key, str) or not _fits_value(value, own):
            raise CheckpointError(f"{where} is damaged: {key!r} is {value!r}, which {type(optimizer).__name__} "
                                  f"cannot take (it holds {own!r}); load an earlier checkpoint")


def _same_kind_of_value(saved: Any, current: Any) -> bool:
    """A plain value where the object holds one of its kind: a count for a count, a string for a
    string (``None`` anywhere: an unset value)."""
    if saved is None or current is None:
        return True
    if isinstance(current, bool):
        return isinstance(saved, bool)
    if _is_number(current) or is_integer(current):  # an int may hold a float later (a learning rate of 1)
        return _is_number(saved) or is_integer(saved)
    if isinstance(current, str):
        return isinstance(saved, str)
    return True


def check_tree(saved: Any, current: Any, where: str, path: str = "") -> None:
    """Every tensor at the same place in both trees must have the same shape and dtype, and
    every plain value the kind the object holds there (a scheduler's ``step_size`` a count,
    not ``"abc"``)."""
    if not _same_kind_of_value(saved, current):
        raise CheckpointError(f"{where} is damaged: {path or 'the state'} is {saved!r:.60}, where the object holds "
                              f"a {type(current).__name__} ({current!r:.40}); load an earlier checkpoint")
    if isinstance(current, torch.Tensor):
        if not isinstance(saved, torch.Tensor):
            if saved is not None:
                raise _refuse(where, path or "the state", saved, current)
            return
        if not _fits(saved, current, False):
            raise _refuse(where, path or "the state", saved, current)
        _check_sparse_indices(saved, where, path or "the state")
        return
    if isinstance(saved, Mapping) and isinstance(current, Mapping):
        for key in saved:
            if key in current:
                check_tree(saved[key], current[key], where, f"{path}[{key!r}]")
    elif isinstance(saved, (list, tuple)) and isinstance(current, (list, tuple)):
        for index, (theirs, ours) in enumerate(zip(saved, current)):
            check_tree(theirs, ours, where, f"{path}[{index}]")


def check_rng(saved: Any, current: Mapping[str, Any], where: str) -> None:
    """Try each saved RNG state on a scratch generator, so a bad one fails before any is set."""
    if not isinstance(saved, Mapping):
        raise CheckpointError(f"{where} is not an RNG state")
    # numpy accepts a position past its key and then reads outside the generator: check first
    check_python_rng(saved.get("python"), where)
    check_numpy_rng(saved.get("numpy"), where)
    try:
        random.Random().setstate(saved["python"])
        np.random.RandomState().set_state(saved["numpy"])
        torch.Generator().set_state(saved["torch"])
    except (KeyError, TypeError, ValueError, RuntimeError, OverflowError) as error:
        raise CheckpointError(f"{where} holds an RNG state this process cannot use ({type(error).__name__}: {error})") from None
    check_tree(saved.get("device"), current.get("device"), where, "['device']")
