"""Accelerate's backend arguments of ``Accelerator(...)`` and ``AcceleratorState(...)``.

Accelerate's constructors take backend objects among their general arguments
(``deepspeed_plugin`` to ``megatron_lm_plugin`` after ``dataloader_config``, ...). The facade's
signatures carry those parameters under Accelerate's names and positions (the design's rule 8:
the names may appear in the signature so positional calls land right), each annotated
:data:`BackendArgument`; what a value means stays in the plugin that owns it. The core
learns who that is from the installed strategies: each ``StrategySpec.accelerator_arguments``
declares the keywords it takes (``fsdp_plugin``). This module answers:

- which backend arguments a call was given (``given_backend_arguments``), without the core
  writing a backend's name in its code;
- which strategy the given keywords select (``strategy_for_options``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

from ..kernel.errors import ConfigError
from ..kernel.plugin_manager import get_plugin_manager
from .choice import requests_from_env

#: The annotation of a backend parameter in a facade signature: a backend's object, handed to
#: the strategy whose ``accelerator_arguments`` declares the parameter's name; ``None`` means
#: not given.
BackendArgument = Any


@functools.cache
def backend_parameters(function: Callable[..., Any]) -> tuple[str, ...]:
    """The parameters of ``function`` annotated :data:`BackendArgument`, in order (its module
    uses postponed annotations, so each annotation is the text as written)."""
    return tuple(name for name, annotation in function.__annotations__.items()
                 if str(annotation).startswith("BackendArgument"))


def given_backend_arguments(function: Callable[..., Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The backend arguments among ``arguments`` (a call's ``locals()``) that were given."""
    return {name: arguments[name] for name in backend_parameters(function) if arguments[name] is not None}


def _strategy_specs() -> list[Any]:
    return [spec for _plugin, spec in get_plugin_manager().registrations("drivetrain_register_strategies")]


def strategy_for_options(options: dict[str, Any]) -> str | None:
    """The strategy whose ``accelerator_arguments`` the given keywords are.

    A keyword no installed strategy declares is accepted when its value is ``None`` (a
    script written for Accelerate passing ``..._plugin=None``) and refused otherwise.
    """
    given = {arg: value for arg, value in options.items() if value is not None}
    if not given:
        return None
    specs = _strategy_specs()
    owners = {arg: spec.name for spec in specs for arg in spec.accelerator_arguments}
    unknown = sorted(set(given) - set(owners))
    if unknown:
        raise TypeError(f"Accelerator() got unexpected keyword argument(s) {unknown}: no installed strategy "
                        f"accepts them (strategies accept: {sorted(owners) or 'none'}); install the plugin "
                        "that provides it, see `drivetrain plugins list`")
    chosen = {owners[arg] for arg in given}
    requested = requests_from_env(get_plugin_manager()).strategy
    if requested and requested not in chosen and any(
            spec.name == requested and set(given) <= set(spec.composes_arguments) for spec in specs):
        # the launcher's strategy composes these options (a layout Accelerate's guide passes in
        # code while the config file names the strategy): it stays the run's
        return requested
    if len(chosen) > 1:
        # one strategy may compose with another's options (a mesh that shards with FSDP)
        composing = [spec.name for spec in specs
                     if spec.name in chosen and set(given) <= {*spec.accelerator_arguments, *spec.composes_arguments}]
        if len(composing) != 1:
            raise ConfigError(f"options for several strategies were given ({sorted(chosen)}); choose one")
        return composing[0]
    return chosen.pop()
