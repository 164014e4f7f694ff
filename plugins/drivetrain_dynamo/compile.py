"""torch.compile with TorchDynamoPlugin's options."""

from __future__ import annotations

from typing import Any

import torch


def compile_model(model: torch.nn.Module, options: Any) -> torch.nn.Module:
    kwargs: dict[str, Any] = {"backend": options.backend, **options.compile_kwargs()}
    if options.use_regional_compilation:
        # Compile each repeated block once instead of the whole model: faster to compile.
        for module in model.modules():
            for name, child in list(module.named_children()):
                if isinstance(child, torch.nn.ModuleList):
                    for index, block in enumerate(child):
                        child[index] = torch.compile(block, **kwargs)
        return model
    return torch.compile(model, **kwargs)
