"""The run hooks of the ``deepspeed`` strategy, called only while DeepSpeed is the run's strategy.

The plugin also offers a launcher and a cluster environment, so its module is active in runs
that use another strategy (a job started by DeepSpeed's launcher running DDP); keeping the
strategy's hooks on this role object (``StrategySpec(hooks=...)``) means none of them has to
check which strategy the run chose. Cheap to import: the engine is imported by each hook.
"""

from __future__ import annotations

import contextlib

from drivetrain.plugin_api import ConfigError, DrivetrainError, hookimpl


class DeepSpeedStrategy:
    """DeepSpeed's engine as the run's strategy: it prepares all objects of a ``prepare`` call
    at once, steps inside ``backward``, and saves engine checkpoints."""

    @hookimpl
    def drivetrain_configure_run(self, run, accelerator):
        from .engine import runtime_of

        return runtime_of(run).configure(accelerator)

    @hookimpl
    def drivetrain_prepare_objects(self, objects, run, device_placement, accelerator):
        from .engine import prepare_engine, runtime_of

        return prepare_engine(runtime_of(run), objects, accelerator)

    @hookimpl
    def drivetrain_wrap_model(self, model, run, evaluation_mode):
        raise ConfigError("with DeepSpeed, models are prepared by accelerator.prepare(model, optimizer, ...), which "
                          "builds the engine; prepare_model() alone cannot")

    @hookimpl(tryfirst=True)
    def drivetrain_wrap_optimizer(self, optimizer, run):
        raise ConfigError("with DeepSpeed, pass the optimizer to accelerator.prepare() together with its model")

    @hookimpl(tryfirst=True)
    def drivetrain_wrap_scheduler(self, scheduler, optimizers, run):
        raise ConfigError("with DeepSpeed, pass the scheduler to accelerator.prepare() together with its model and "
                          "optimizer")

    @hookimpl(tryfirst=True)
    def drivetrain_make_grad_scaler(self, run, kwargs):
        # DeepSpeed scales fp16 losses in its engine: the run must have no scaler of its own.
        return False

    @hookimpl(tryfirst=True)
    def drivetrain_autocast(self, run, kwargs):
        # The engine runs the model in the config's precision; autocast on top would change it.
        return contextlib.nullcontext()

    @hookimpl(tryfirst=True)
    def drivetrain_backward(self, loss, run, kwargs, models):
        from .engine import backward

        return backward(models, loss, kwargs)

    @hookimpl(tryfirst=True)
    def drivetrain_clip_grad_norm(self, parameters, max_norm, norm_type, run):
        from .engine import clip_grad_norm, runtime_of

        return clip_grad_norm(runtime_of(run), list(parameters), max_norm)

    @hookimpl(tryfirst=True)
    def drivetrain_clip_grad_value(self, parameters, clip_value, run):
        # The engine stepped (and cleared the gradients) inside accelerator.backward, as in Accelerate.
        raise DrivetrainError("DeepSpeed cannot clip gradients by value: its engine steps inside "
                              "accelerator.backward; use accelerator.clip_grad_norm_ (gradient_clipping in the "
                              "DeepSpeed config) instead")

    @hookimpl
    def drivetrain_compile_model(self, model, run, options):
        from .engine import compile_engine, is_engine

        return compile_engine(model, options) if is_engine(model) else None

    @hookimpl
    def drivetrain_get_state_dict(self, model, run, unwrap):
        from .engine import full_state_dict, is_engine, is_zero3, runtime_of

        if not (is_engine(model) and is_zero3(model)):
            return None
        state = full_state_dict(model, run, runtime_of(run).plugin_of(model))
        return state if unwrap else {f"module.{key}": value for key, value in state.items()}

    @hookimpl
    def drivetrain_save_model_state(self, model, index, directory, run, safe_serialization, options):
        from .checkpoint import save_engine

        return save_engine(model, index, directory, run, options)

    @hookimpl
    def drivetrain_check_checkpoint(self, models, directory, run, manifest, options):
        from .checkpoint import check_engines

        check_engines(models, directory, run, manifest, options)

    @hookimpl
    def drivetrain_load_model_state(self, model, index, directory, run, manifest, options):
        from .checkpoint import load_engine

        return load_engine(model, index, directory, run, manifest, options)

    @hookimpl
    def drivetrain_save_optimizer_state(self, optimizer, index, directory, run):
        from .engine import DeepSpeedOptimizerWrapper

        # Saved with its engine (deepspeed_model_<i>/): nothing more to write.
        return [] if isinstance(optimizer, DeepSpeedOptimizerWrapper) else None

    @hookimpl
    def drivetrain_load_optimizer_state(self, optimizer, index, directory, run, manifest):
        from .engine import DeepSpeedOptimizerWrapper

        return True if isinstance(optimizer, DeepSpeedOptimizerWrapper) else None