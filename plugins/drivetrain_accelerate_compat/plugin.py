"""Accelerate compatibility: probes and enumeration members for backends that are absent.

Registers no role. The plugin that owns a backend contributes that backend's probe
(``is_deepspeed_available``) and enumeration members; this plugin's entries are fallbacks,
used only where no plugin contributes the name, so ``is_npu_available()`` answers ``False``
and ``DistributedType.MULTI_NPU`` exists on a machine without that backend's plugin.
"""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, hookimpl

from .catalogue import ENUM_MEMBERS, PROBES
from .state_defaults import declarations

PLUGIN_INFO = PluginInfo(api_version="2.0", description="Accelerate's probes and enum members where a backend is absent")


@hookimpl
def drivetrain_fallback_names():
    names = {f"utils.{probe}": f"drivetrain_accelerate_compat.fallbacks:{probe}" for probe in PROBES}
    return names


@hookimpl
def drivetrain_register_backend_attributes():
    return declarations()


@hookimpl
def drivetrain_enum_members():
    return dict(ENUM_MEMBERS)
