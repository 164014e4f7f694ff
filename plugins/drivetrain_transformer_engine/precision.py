"""The ``fp8``/``te`` precision's role object (``run.precision``, ``PrecisionSpec(hooks=...)``):
TE layers swapped in before wrapping, ``fp8_autocast`` around forward after. Cheap to import:
Transformer Engine is imported by the methods that use it.
"""

from __future__ import annotations

from typing import Any

from drivetrain.plugin_api import Precision, hookimpl


def recipe_of(run: Any) -> Any:
    """The recipe the user gave through kwargs handlers, or the default one."""
    from .recipe import TERecipeKwargs

    return run.handler_kwargs.get("TERecipeKwargs") or run.handler_kwargs.get("FP8RecipeKwargs") or TERecipeKwargs()


class TransformerEnginePrecision(Precision):
    """fp8 through Transformer Engine as the run's precision: TE layers swapped in, then fp8_autocast around forward."""

    @hookimpl
    def drivetrain_configure_run(self, run, accelerator):
        import types

        given = run.handler_kwargs.get("TERecipeKwargs") or run.handler_kwargs.get("FP8RecipeKwargs")
        recipe = given or recipe_of(run)
        return types.SimpleNamespace(fp8_backend="TE", fp8_enabled=True, has_fp8_handler=given is not None,
                                     te_recipe_handler=recipe, fp8_recipe_handler=recipe, ao_recipe_handler=None,
                                     msamp_recipe_handler=None, delayed_fp8_autocast=False)

    def convert_model(self, model: Any) -> Any:
        from .layers import convert_model, has_transformer_engine_layers

        if not has_transformer_engine_layers(model):
            import torch

            with torch.no_grad():
                convert_model(model)
        return model

    def finalize_model(self, model: Any) -> Any:
        from .layers import apply_fp8_autowrap

        return apply_fp8_autowrap(model, recipe_of(self.run))
