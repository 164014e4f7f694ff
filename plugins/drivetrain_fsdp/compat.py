"""Accelerate's FSDP helpers at ``drivetrain.utils``: RAM-efficient loading switches, name
canonicalisation, regional compilation before sharding, the grad scaler."""

from __future__ import annotations

import os
import unittest
from typing import Any

from drivetrain.plugin_api import environment

from .options import AUTO_WRAP_POLICIES, BACKWARD_PREFETCH, ENV, SHARDING_STRATEGIES

_RAM_EFFICIENT = ENV["cpu_ram_efficient_loading"]


def _set_both(variable: str, value: str) -> None:
    # drivetrain's name and Accelerate's, so neither reader disagrees with the other
    os.environ[environment.own_name(variable)] = value
    os.environ[variable] = value


def enable_fsdp_ram_efficient_loading() -> None:
    """Only the main process loads real weights (``from_pretrained`` under FSDP); the others
    receive them when the model is sharded."""
    _set_both(_RAM_EFFICIENT, "True")  # Accelerate's spelling: str(True)


def disable_fsdp_ram_efficient_loading() -> None:
    """Every process loads the full weights itself."""
    _set_both(_RAM_EFFICIENT, "False")


def fsdp2_canonicalize_names(named_params: dict[str, Any]) -> dict[str, Any]:
    """The names without the segments wrappers add (``_orig_mod.``, ``_checkpoint_wrapped_module.``,
    ``_fsdp_wrapped_module.``), as the user's model names them."""
    from .wrap import clean_name

    return {clean_name(name): value for name, value in named_params.items()}


def compile_regions_fsdp2(module: Any, **compile_kwargs: Any) -> Any:
    """Compile ``module``'s regions in place (``Module.compile``) and return it: each block of a
    repeated run, and every module with no repeated blocks below it (a leaf region, such as
    the head) whole. Sharding afterwards keeps the compiled blocks, of their own classes, as
    the units it shards."""
    from drivetrain.plugin_api import repeated_blocks as _repeated_blocks

    def has_repeated_blocks(node: Any) -> bool:
        return any(_repeated_blocks(inner) for inner in node.modules())

    if _repeated_blocks(module):
        for block in module:
            block.compile(**compile_kwargs)
    elif has_repeated_blocks(module):
        for child in module.children():
            compile_regions_fsdp2(child, **compile_kwargs)
    else:
        module.compile(**compile_kwargs)
    return module


def get_fsdp2_grad_scaler(**kwargs: Any) -> Any:
    """A gradient scaler for fp16 with FSDP2: torch's, whose unscale step handles ``DTensor``
    gradients sharded across processes."""
    import torch

    return torch.amp.GradScaler(**kwargs)


# Accelerate's `accelerate.utils.constants` lists of the option values (lists, as there: callers
# index them and print them)
FSDP_SHARDING_STRATEGY = list(SHARDING_STRATEGIES)
FSDP_AUTO_WRAP_POLICY = list(AUTO_WRAP_POLICIES)
FSDP_BACKWARD_PREFETCH = list(BACKWARD_PREFETCH)
# Every state-dict type torch's FSDP1 names (LOCAL_STATE_DICT among them, though refused here:
# the list names torch's enum members, by index), and those FSDP2 accepts.
FSDP_STATE_DICT_TYPE = ["FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"]
FSDP2_STATE_DICT_TYPE = ["SHARDED_STATE_DICT", "FULL_STATE_DICT"]
FSDP_MODEL_NAME = "pytorch_model_fsdp"


def get_parameters_from_modules(modules: Any, model: Any, device: Any) -> set:
    """The parameters of ``modules`` (module objects, or a regular expression over the model's
    module names, whose matches are moved to ``device`` first): what FSDP is told to ignore."""
    from .wrap import modules_named

    if modules is None:
        return set()
    if isinstance(modules, str):
        modules = [module.to(device) for module in modules_named(model, modules)]
    return {parameter for module in modules for parameter in module.parameters()}


def require_fsdp2(test_case: Any) -> Any:
    """Accelerate's ``test_utils.testing.require_fsdp2``: FSDP2 (``fully_shard``) needs torch >= 2.5."""
    from drivetrain.plugin_api import is_torch_version

    return unittest.skipUnless(is_torch_version(">=", "2.5.0"), "test requires FSDP2 (torch >= 2.5.0)")(test_case)
