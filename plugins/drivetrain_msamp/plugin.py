"""fp8 through MS-AMP: ``msamp.initialize`` on the model and optimizer, opt levels O1 and O2;
with DeepSpeed, the deepspeed plugin runs MS-AMP's engine (``enable_msamp``).

Selected by ``mixed_precision="fp8"`` with ``MSAMPRecipeKwargs``, ``--fp8-backend msamp`` or
``precision_backend: msamp``. Needs a CUDA GPU of compute capability 8.9 or newer and MS-AMP
built from source.
"""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, PrecisionSpec, Probe, hookimpl

PLUGIN_INFO = PluginInfo(api_version="1.0", description="fp8 with MS-AMP (O1/O2)", requires=("msamp",),
                         install_hint="install MS-AMP from its source tree (github.com/Azure/MS-AMP); "
                                      "it is not on the package index")


def probe() -> Probe:
    import torch

    import drivetrain.utils

    if not torch.cuda.is_available() or not drivetrain.utils.check_cuda_fp8_capability():
        return Probe(False, "MS-AMP needs a CUDA GPU of compute capability 8.9 or newer")
    return Probe(True, "MS-AMP on an fp8-capable GPU")


def _mine(run) -> bool:
    return run.selection.precision is not None and run.selection.precision.backend == "msamp"


def _recipe(run):
    from .recipe import MSAMPRecipeKwargs

    return run.handler_kwargs.get("MSAMPRecipeKwargs") or MSAMPRecipeKwargs()


@hookimpl
def drivetrain_register_precisions():
    return [PrecisionSpec(name="fp8", backend="msamp", platforms=("cuda",), probe=probe, priority=20,
                          description="MS-AMP fp8 weights, gradients and optimizer states")]


@hookimpl(trylast=True)  # after a strategy's (DeepSpeed's options object)
def drivetrain_configure_run(run, accelerator):
    if not _mine(run):
        return None
    import types

    given = run.handler_kwargs.get("MSAMPRecipeKwargs")
    recipe = _recipe(run)
    deepspeed = getattr(accelerator, "deepspeed_plugin", None)
    if deepspeed is not None and hasattr(deepspeed, "enable_msamp"):
        deepspeed.enable_msamp, deepspeed.msamp_opt_level = True, recipe.opt_level
    return types.SimpleNamespace(fp8_backend="MSAMP", fp8_enabled=True, has_fp8_handler=given is not None,
                                 msamp_recipe_handler=recipe, fp8_recipe_handler=recipe, te_recipe_handler=None,
                                 ao_recipe_handler=None, delayed_fp8_autocast=False)


@hookimpl(trylast=True)
def drivetrain_prepare_objects(objects, run, device_placement, accelerator):
    """MS-AMP converts a model and its optimizer together. A strategy that builds an engine
    (DeepSpeed runs MS-AMP's own engine) answers first."""
    if not _mine(run):
        return None
    import torch

    from drivetrain.errors import ConfigError

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
    model, optimizer = initialize(model, objects[optimizer_index], _recipe(run).opt_level)
    result = list(objects)
    result[model_index] = accelerator.prepare_model(model, device_placement=False)
    result[optimizer_index] = accelerator.prepare_optimizer(optimizer, device_placement=device_placement[optimizer_index])
    for index, obj in enumerate(objects):
        if index not in (model_index, optimizer_index) and isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
            obj.optimizer = optimizer
            result[index] = accelerator.prepare_scheduler(obj)
    return result


@hookimpl
def drivetrain_public_names():
    return {
        "MSAMPRecipeKwargs": "drivetrain_msamp.recipe:MSAMPRecipeKwargs",
        "utils.MSAMPRecipeKwargs": "drivetrain_msamp.recipe:MSAMPRecipeKwargs",
        "utils.is_msamp_available": "drivetrain_msamp.probes:is_msamp_available",
    }


@hookimpl
def drivetrain_add_launch_arguments(parser):
    group = parser.add_argument_group("FP8 (MS-AMP)", "plugin msamp")
    group.add_argument("--fp8-opt-level", type=str.upper, choices=("O1", "O2"),
                       help="MS-AMP optimisation level (default O2)")


@hookimpl
def drivetrain_launch_environment(args):
    level = getattr(args, "fp8_opt_level", None)
    return {"ACCELERATE_FP8_OPT_LEVEL": level} if level else None
