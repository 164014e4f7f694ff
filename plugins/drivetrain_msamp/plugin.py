"""fp8 through MS-AMP: ``msamp.initialize`` on the model and optimizer, opt levels O1 and O2;
with DeepSpeed, the strategy is asked to run MS-AMP's engine (``drivetrain_adopt_precision``).

Selected by ``mixed_precision="fp8"`` with ``MSAMPRecipeKwargs``, ``--fp8-backend msamp`` or
``precision_backend: msamp``. Needs a CUDA GPU of compute capability 8.9 or newer and MS-AMP
built from source.
"""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, PrecisionSpec, Probe, hookimpl

# API 1.3: the precision's run hooks on its role object; 1.6: it asks the strategy (drivetrain_adopt_precision).
PLUGIN_INFO = PluginInfo(api_version="2.0", description="fp8 with MS-AMP (O1/O2)", requires=("msamp",),
                         install_hint="install MS-AMP from its source tree (github.com/Azure/MS-AMP); "
                                      "it is not on the package index")


def probe() -> Probe:
    import torch

    from drivetrain.plugin_api import contributed

    # The cuda plugin answers whether the GPU has fp8 units; without it, no GPU qualifies.
    fp8_capable = contributed("utils.check_cuda_fp8_capability", lambda: False)
    if not torch.cuda.is_available() or not fp8_capable():
        return Probe(False, "MS-AMP needs a CUDA GPU of compute capability 8.9 or newer")
    return Probe(True, "MS-AMP on an fp8-capable GPU")


@hookimpl
def drivetrain_register_precisions():
    return [PrecisionSpec(name="fp8", backend="msamp", platforms=("cuda",), probe=probe, priority=20,
                          hooks="drivetrain_msamp.precision:MSAMPPrecision",
                          description="MS-AMP fp8 weights, gradients and optimizer states")]


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
