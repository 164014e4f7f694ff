"""The ``fp8``/``ao`` precision's role object (``run.precision``, ``PrecisionSpec(hooks=...)``):
linear layers become torchao's ``Float8Linear`` before the strategy wraps the model. Cheap to
import: torchao is imported when a model is converted."""

from __future__ import annotations

from typing import Any

from drivetrain.plugin_api import Precision


class AOFloat8(Precision):
    """fp8 through torchao: each prepared model's linear layers converted with the run's
    ``AORecipeKwargs`` (the user's, or the default one)."""

    def convert_model(self, model: Any) -> Any:
        from .convert import convert_model_to_fp8_ao, has_ao_layers, warn_nothing_converted
        from .recipe import AORecipeKwargs

        if has_ao_layers(model):
            return model  # prepared twice, or converted by the user
        recipe = self.run.handler_kwargs.get("AORecipeKwargs") or AORecipeKwargs()
        converted = convert_model_to_fp8_ao(model, recipe.float8_config(), recipe.module_filter_fn)
        if not has_ao_layers(converted):
            warn_nothing_converted(converted, custom_filter=recipe.module_filter_fn is not None)
        return converted
