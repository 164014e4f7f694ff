"""``accelerator.profile()``: torch.profiler with ProfileKwargs, one trace file per process."""

from __future__ import annotations

import os
from typing import Any

from torch.profiler import ProfilerActivity, profile, schedule

TRACE_NAME = "profile_{rank}.json"


def _activities(names: list[str] | None, device_type: str) -> list[ProfilerActivity]:
    wanted = names if names is not None else ["cpu", device_type]
    activities = []
    for name in dict.fromkeys(n.lower() for n in wanted):
        activity = getattr(ProfilerActivity, name.upper(), None)
        if activity is None:
            if names is not None:
                from ..kernel.errors import ConfigError

                known = ", ".join(a.name.lower() for a in ProfilerActivity)
                raise ConfigError(f"unknown profiler activity {name!r}; torch knows: {known}")
            continue
        activities.append(activity)
    return activities


def build_profiler(handler: Any, device_type: str) -> profile:
    kwargs: dict[str, Any] = {
        "activities": _activities(handler.activities, device_type),
        "record_shapes": handler.record_shapes,
        "profile_memory": handler.profile_memory,
        "with_stack": handler.with_stack,
        "with_flops": handler.with_flops,
        "with_modules": handler.with_modules,
    }
    if handler.schedule_option:
        kwargs["schedule"] = schedule(**handler.schedule_option)
    if handler.on_trace_ready is not None:
        kwargs["on_trace_ready"] = handler.on_trace_ready
    return profile(**kwargs)


def export_trace(profiler: profile, handler: Any, rank: int) -> str | None:
    """Write the Chrome trace of ``profiler`` when ``output_trace_dir`` is set; returns its path."""
    if not handler.output_trace_dir:
        return None
    os.makedirs(handler.output_trace_dir, exist_ok=True)
    path = os.path.join(handler.output_trace_dir, TRACE_NAME.format(rank=rank))
    profiler.export_chrome_trace(path)
    return path


__all__ = ["build_profiler", "export_trace"]
