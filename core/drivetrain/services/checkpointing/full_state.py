"""The full state dict of a prepared model: what ``Accelerator.get_state_dict`` returns, and
what a checkpoint or ``save_model`` writes for a model when no strategy writes it itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..other import unwrap_prepared_model

if TYPE_CHECKING:  # pragma: no cover
    from ...runtime.session import Session


def full_state_dict(session: Session, model: torch.nn.Module, unwrap: bool = True) -> dict[str, Any]:
    """The full state dict of a prepared model (gathered where the strategy shards it)."""
    state = session.run.call("drivetrain_get_state_dict", model=model, unwrap=unwrap)
    if state is None:
        from ..big_model.modeling import get_state_dict_offloaded_model, has_offloaded_params

        module = unwrap_prepared_model(session.run, model, keep_fp32_wrapper=False) if unwrap else model
        # weights that offload hooks keep elsewhere (meta tensors here) are loaded one module at a time
        offloaded = any(has_offloaded_params(part) for part in module.modules())
        state = get_state_dict_offloaded_model(module) if offloaded else module.state_dict()
    return state
