"""Stand-ins named by ``drivetrain_fallback_names``: each ``is_*`` probe answers ``False``."""

from __future__ import annotations

from drivetrain.plugin_api.probes import absent_probe

from .catalogue import PROBES

# One function per probe of the catalogue, each named as the probe it stands for.
globals().update({probe: absent_probe(probe) for probe in PROBES})
