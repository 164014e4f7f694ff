"""The ``fp8``/``msamp`` precision's role object (``PrecisionSpec(hooks=...)``) and its run hooks. Cheap to import: MS-AMP is imported by the hooks that use it.
"""

from __future__ import annotations

from typing import Any

from drivetrain.plugin_api import Precision, hookimpl


def recipe_of(run: Any) -> Any:
    """The recipe the user gave through kwargs handlers, or the default one."""
    from .recipe import MSAMPRecipeKwargs

    return run.handler_kwargs.get("MSAMPRecipeKwargs") or MSAMPRecipeKwargs()


class MSAMPPrecision(Precision):
    """fp8 through MS-AMP as the run's precision: the run's recipe, and model and optimizer
    converted together, unless the strategy's engine applies MS-AMP itself.

    Attributes:
        recipe: the run's :class:`MSAMPRecipeKwargs` (the user's, or the default one).
        adopted: whether the run's strategy applies MS-AMP in its engine (DeepSpeed does).
    """

    def __init__(self, run: Any, spec: Any = None) -> None:
        super().__init__(run, spec)
        self.recipe: Any = None
        self.adopted = False

    @hookimpl(trylast=True)  # after the strategy configured itself: it is asked below
    def drivetrain_configure_run(self, run, accelerator):
        import types

        given = run.handler_kwargs.get("MSAMPRecipeKwargs")
        self.recipe = recipe = recipe_of(run)
        self.adopted = bool(run.call("drivetrain_adopt_precision", precision=run.selection.precision, recipe=recipe))
        return types.SimpleNamespace(fp8_backend="MSAMP", fp8_enabled=True, has_fp8_handler=given is not None,
                                     msamp_recipe_handler=recipe, fp8_recipe_handler=recipe, te_recipe_handler=None,
                                     ao_recipe_handler=None, delayed_fp8_autocast=False)

    @hookimpl(trylast=True)
    def drivetrain_prepare_objects(self, objects, run, device_placement, accelerator):
        """MS-AMP converts a model and its optimizer together, unless the strategy's engine does
        (it answered ``drivetrain_adopt_precision``)."""
        if self.adopted:
            return None
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
