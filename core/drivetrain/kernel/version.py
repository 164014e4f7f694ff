"""Versions that plugins and checkpoints are checked against."""

__version__ = "0.1.0"

#: The hook-spec version this core offers, as "MAJOR.MINOR". A plugin declares the version it
#: was written for (``PluginInfo.api_version``); it loads when the majors are equal and its
#: minor is not newer than ours. Add hooks or optional arguments: bump MINOR. Remove or
#: change the meaning of anything: bump MAJOR.
#:
#: 1.3: ``drivetrain.plugin_api`` is a package, the whole surface plugins import (base classes,
#: errors, options, probes, launching, checkpoint and model helpers); descriptors of a role may
#: name a role object whose hooks are called only while that item is chosen (``hooks=``).
#: 1.4: ``drivetrain_transform_objects``: the objects of a ``prepare`` call rewritten together, first.
#: 1.5: ``drivetrain_check_checkpoint``: a strategy checks every model and optimizer it loads
#: before the processes agree and before any load hook changes anything.
#: 1.6: role objects are built for each run and keep its state (``Run.role("strategy")``); an
#: extension may name what it ``exposes``; ``drivetrain_adopt_precision``: a precision asks the
#: strategy to apply it in its engine.
#: 1.7: ``prepared_objects(accelerator)``: what an accelerator has prepared, read by plugins
#: instead of the facade's private lists.
#: 1.8: ``ConfigField(needs_library=False)``: a descriptive key accepted where the plugin's
#: library is missing; ``LauncherSpec(command_prefix=...)``: a launcher that is one command
#: (mpirun) says what goes before a process's command line; ``find_executable`` and
#: ``program_version``, the look-ups launchers make.
#: 1.9: ``deferred`` of the model and optimizer save hooks: in ``save_state(blocking=False)``
#: a strategy may hand its writing to the core's commit thread (``DeferredWrites``).
#: 1.10: ``Platform.peak_memory()`` and ``Platform.peak_flops(precision)``, what ``MonitorKwargs``
#: reports for a platform's devices; ``watch_module_functions`` and ``watched``: a communication
#: plugin notes its library's collectives while they run, for hang reports; ``recorded_collectives``,
#: the ranks' reports.
#: 2.0: one run per ``AcceleratorState`` holding its role objects as typed attributes
#: (``run.strategy``, ``run.precision``: subclasses of ``plugin_api.Strategy`` and
#: ``plugin_api.Precision`` that ``StrategySpec.hooks``/``PrecisionSpec.hooks`` name, built as
#: ``cls(run, arguments)``/``cls(run, spec)``); a strategy owns or refuses its precision
#: (``Strategy.own_precision``). The step is their methods, called directly: the hooks
#: ``drivetrain_backward``, ``drivetrain_clip_grad_norm``, ``drivetrain_clip_grad_value``,
#: ``drivetrain_autocast``, ``drivetrain_make_grad_scaler``, ``drivetrain_no_sync``,
#: ``drivetrain_sync_in_backward`` and ``drivetrain_convert_model`` are gone, and
#: ``drivetrain_wrap_dataloader`` is ``Platform.wrap_dataloader``. No hook is *chained* any
#: more: ``drivetrain_transform_objects`` and ``drivetrain_finalize_model`` are *firstresult*.
#: ``run.options`` and ``Run.role()`` are gone: a strategy's ``Accelerator`` keywords are its
#: ``arguments``, the compile options ``run.compile_options``.
#: ``drivetrain_register_backend_attributes``: a plugin declares Accelerate's attributes of a
#: backend (``BackendAttribute``), which the core installs on the owner class (no fall-through
#: ``__getattr__`` on ``Accelerator``/``AcceleratorState`` any more).
PLUGIN_API_VERSION = "2.0"
