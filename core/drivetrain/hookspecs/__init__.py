"""The hook specifications: everything a plugin can tell or do for drivetrain.

A plugin is a module (the target of an entry point in the ``drivetrain.plugins`` group) that
declares ``PLUGIN_INFO`` and implements some of the hooks below with
``@drivetrain.plugin_api.hookimpl``. An implementation may accept fewer arguments than the
spec lists (pluggy passes only those it names); naming an argument the spec does not have,
or a hook that does not exist, gets the plugin refused with the reason.

Every spec documents each argument (``:param:``), what its return value means
(``:return:``), and ends with one line stating its calling convention and the plugin API
version it arrived in (``Run hook, *firstresult*, API 1.0.``); ``tests/test_hookspecs.py``
holds every spec to that. The kinds of hook:

**Registration hooks** (``drivetrain_register_*``, names, enumeration members,
``drivetrain_env_report``) are called once per process on every loaded plugin, including
those whose library is missing, so that drivetrain can list, explain and refuse them. They
must be cheap: return descriptors whose heavy parts are lazy references, import nothing
optional.

**Command-line hooks** (``drivetrain_add_launch_arguments``, ``drivetrain_launch_environment``,
``drivetrain_add_cli_commands``) are called on every loaded plugin when the ``drivetrain``
command builds its parser or starts a job; a raising one is skipped unless its plugin is
selected.

**Run hooks** (every hook taking ``run``) are called only on the plugins active in this run:
the chosen platform, cluster environment, strategy, precision, trackers, and the plugins
those declare. They are resolved once, when the ``Accelerator`` is built, so a training step
pays no discovery cost. ``run`` is the run of this ``AcceleratorState``
(:class:`drivetrain.plugin_api.Run`): the process state, the choice for each role, its role
objects, the user's kwargs handlers. A strategy's or precision's descriptor names a class
(``StrategySpec.hooks``, ``PrecisionSpec.hooks``: a subclass of
:class:`drivetrain.plugin_api.Strategy` or :class:`~drivetrain.plugin_api.Precision`); the run
builds one object of it (``run.strategy``, ``run.precision``) and keeps it for its lifetime. What
happens at every step (backward, clipping, autocast, the grad scaler, ``no_sync``) and the
precision's conversion of a model are methods of those objects, called directly: they are no
hooks. The object's ``@hookimpl`` methods are run hooks answered only through its run, so a
plugin with several roles needs no check of the run's choice in each hook.

The calling conventions:

- *firstresult*: implementations are called in order until one returns something other than
  ``None``; that answer wins and the rest are not called. ``None`` means "not mine, ask the
  next"; where a hook gives ``False`` a meaning of its own (the grad scaler, the clipped
  norm), ``False`` is an answer that stops the call.
- *collected*: every implementation is called; each non-``None`` answer is used (merged or
  listed, as the hook says).
- *broadcast*: every implementation is called; the return value is ignored.

Order among implementations follows pluggy: ``tryfirst=True`` first, ``trylast=True`` last,
otherwise the plugin registered last first (a role object before modules). Precedence is
therefore stated by the marks plus the *firstresult* rule: a strategy that takes over a step
(DeepSpeed's engine runs backward itself) marks its implementation ``tryfirst`` and answers;
a plugin that only fills in a default marks it ``trylast``.

The order in which the model is transformed is fixed: ``drivetrain_transform_objects`` (a
library rewriting a model with its optimizer) -> device placement (platform) ->
``run.precision.convert_model`` (precision conversions such as FP8 layers, autocast of
``forward``) -> ``drivetrain_wrap_model`` (the parallel wrapper of the strategy) ->
``run.precision.finalize_model`` -> ``drivetrain_finalize_model`` (compilation). A strategy whose
``StrategySpec.places_models`` is true places the model itself, in ``drivetrain_wrap_model``
(a sharding strategy shards first), and the core skips its own placement. A strategy that
answers ``drivetrain_prepare_objects`` takes the place of placement and wrapping: the core
still converts the models before handing them over and finalises the models it returns, so
every transform runs whatever the strategy.

Types named in the signatures are the real classes (imported for type checkers only, so
loading the specs imports no torch); ``Any`` remains where the hook truly takes anything
(the user's objects of a ``prepare`` call, keyword arguments, JSON manifests), as each
``:param:`` says.
"""

from __future__ import annotations

from .registration import (
    drivetrain_register_platforms,
    drivetrain_register_cluster_environments,
    drivetrain_register_strategies,
    drivetrain_register_precisions,
    drivetrain_register_trackers,
    drivetrain_register_launchers,
    drivetrain_register_config_sections,
    drivetrain_public_names,
    drivetrain_fallback_names,
    drivetrain_distributed_types,
    drivetrain_enum_members,
    drivetrain_register_backend_attributes,
    drivetrain_env_report,
)
from .cli import (
    drivetrain_add_launch_arguments,
    drivetrain_launch_environment,
    drivetrain_add_cli_commands,
)
from .process import (
    drivetrain_init_distributed,
    drivetrain_collectives,
    drivetrain_configure_run,
    drivetrain_adopt_precision,
)
from .model import (
    drivetrain_prepare_objects,
    drivetrain_transform_objects,
    drivetrain_wrap_model,
    drivetrain_finalize_model,
    drivetrain_compile_model,
    drivetrain_unwrap_model,
)
from .step import (
    drivetrain_wrap_optimizer,
    drivetrain_wrap_scheduler,
)
from .checkpoint import (
    drivetrain_get_state_dict,
    drivetrain_save_model_state,
    drivetrain_load_model_state,
    drivetrain_check_checkpoint,
    drivetrain_save_optimizer_state,
    drivetrain_load_optimizer_state,
    drivetrain_on_checkpoint,
)

#: Hooks kept so that plugins implementing them still load (the plugin-API rules allow no
#: removal within a major version), but that nothing should implement any more: the plugin
#: manager warns once, naming the plugin and what to do instead. They go at API 2.0.
DEPRECATED_HOOKS: dict[str, str] = {
    "drivetrain_distributed_types": (
        "name the type in PlatformSpec.multi_process_type/single_process_type or "
        "StrategySpec.distributed_type (or contribute it with drivetrain_enum_members("
        "{'DistributedType': [...]}))"
    ),
}

__all__ = [
    "DEPRECATED_HOOKS",
    "drivetrain_register_platforms",
    "drivetrain_register_cluster_environments",
    "drivetrain_register_strategies",
    "drivetrain_register_precisions",
    "drivetrain_register_trackers",
    "drivetrain_register_launchers",
    "drivetrain_register_config_sections",
    "drivetrain_public_names",
    "drivetrain_fallback_names",
    "drivetrain_distributed_types",
    "drivetrain_enum_members",
    "drivetrain_register_backend_attributes",
    "drivetrain_env_report",
    "drivetrain_add_launch_arguments",
    "drivetrain_launch_environment",
    "drivetrain_add_cli_commands",
    "drivetrain_init_distributed",
    "drivetrain_collectives",
    "drivetrain_configure_run",
    "drivetrain_adopt_precision",
    "drivetrain_prepare_objects",
    "drivetrain_transform_objects",
    "drivetrain_wrap_model",
    "drivetrain_finalize_model",
    "drivetrain_compile_model",
    "drivetrain_unwrap_model",
    "drivetrain_wrap_optimizer",
    "drivetrain_wrap_scheduler",
    "drivetrain_get_state_dict",
    "drivetrain_save_model_state",
    "drivetrain_load_model_state",
    "drivetrain_check_checkpoint",
    "drivetrain_save_optimizer_state",
    "drivetrain_load_optimizer_state",
    "drivetrain_on_checkpoint",
]
