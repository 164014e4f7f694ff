"""The run hooks of the ``fp8``/``msamp`` precision, called only while it is the run's precision
(``PrecisionSpec(hooks=...)``). Cheap to import: MS-AMP is imported by the hooks that use it.
"""

from __future__ import annotations

from typing import Any

from drivetrain.plugin_api import hookimpl


def recipe_of(run: Any) -> Any:
    """The recipe the user gave through kwargs handlers, or the default one."""
    from .recipe import MSAMPRecipeKwargs

    return run.handler_kwargs.get("MSAMPRecipeKwargs") or MSAMPRecipeKwargs()


class MSAMPPrecision:
    """fp8 through MS-AMP as the run's precision: the run's recipe, and model and optimizer converted together."""

    @hookimpl(trylast=True)  # after a strategy's (DeepSpeed's options object)
    def drivetrain_configure_run(self, run, accelerator):
        import types

        given = run.handler_kwargs.get("MSAMPRecipeKwargs")
        recipe = recipe_of(run)
        deepspeed = getattr(accelerator, "deepspeed_plugin", None)
        if deepspeed is not None and hasattr(deepspeed, "enable_msamp"):
            deepspeed.enable_msamp, deepspeed.msamp_opt_level = True, recipe.opt_level
        return types.SimpleNamespace(fp8_backend="MSAMP", fp8_enabled=True, has_fp8_handler=given is not None,
                                     msamp_recipe_handler=recipe, fp8_recipe_handler=recipe, te_recipe_handler=None,
                                     ao_recipe_handler=None, delayed_fp8_autocast=False)

    @hookimpl(trylast=True)
    def drivetrain_prepare_objects(self, objects, run, device_placement, accelerator):
        """MS-AMP converts a model and its optimizer together. A strategy that builds an engine
        (DeepSpeed runs MS-AMP's own engine) answers first."""
        import torch

        from drivetrain.plugin_api import ConfigError

        models = [i for i, o in enumerate(objects) if isinstance(o, torch.nn.Module)]
        optimizers = [i for i, o in enumerate(objects) if isinstance(o, torch.optim.Optimizer)]
        if not models and not optimizers:
            return None
        if len(models) != 1 or len(optimizers) != 1:
            raise ConfigError("with MS-AMP, prepare() takes one model with its optimizer in the same call")
        from .initialize import initialize

        model_index, optimizer_index = models[0], optimizers[0]
        model = objects[model_index]
        if device_placement[model_index]:
            model = model.to(accelerator.device)
        model, optimizer = initialize(model, objects[optimizer_index], recipe_of(run).opt_level)
        result = list(objects)
        result[model_index] = accelerator.prepare_model(model, device_placement=False)
        result[optimizer_index] = accelerator.prepare_optimizer(optimizer, device_placement=device_placement[optimizer_index])
        for index, obj in enumerate(objects):
            if index not in (model_index, optimizer_index) and isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
                obj.optimizer = optimizer
                result[index] = accelerator.prepare_scheduler(obj)
        return result
