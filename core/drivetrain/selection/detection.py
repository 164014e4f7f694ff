"""Asks every platform and cluster-environment probe what it sees, and picks the winners.

Probes are cheap callables carried by the descriptors plugins register. Detection runs each
once and keeps every answer, so ``drivetrain plugins list --detect`` can show why something
was or was not chosen.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..kernel.descriptors import Probe
from ..kernel.plugin_guard import PluginCodeFailed
from ..kernel.plugin_manager import PluginManager


@dataclass
class Candidate:
    """One probe's answer."""

    kind: str  # "platform" or "cluster-environment"
    name: str
    plugin: str
    priority: int
    available: bool
    reason: str
    spec: Any = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("spec")
        return data


@dataclass
class DetectionReport:
    """All answers, and the winner of each kind (``None`` when nothing is usable)."""

    candidates: list[Candidate]
    platform: Candidate | None
    cluster_environment: Candidate | None

    def to_json(self) -> dict[str, Any]:
        return {
            "candidates": [c.to_json() for c in self.candidates],
            "platform": self.platform.name if self.platform else None,
            "cluster_environment": self.cluster_environment.name if self.cluster_environment else None,
        }


def ask(manager: PluginManager, plugin_name: str, probe: Any) -> Probe:
    """What plugin ``plugin_name``'s ``probe`` answers; a probe that raises, exits or has not
    answered within the plugin time limit (a third-party one) answers "not available"."""
    try:
        answer = manager.call_plugin_code(plugin_name, probe)
    except PluginCodeFailed as exc:  # a probe must never break or hang detection
        if exc.timed_out:  # it cost the user seconds: say which plugin
            manager.warn(f"the probe of plugin {plugin_name!r} {exc.reason}; it counts as not available")
        return Probe(False, f"probe failed: {exc.reason}")
    if not isinstance(answer, Probe):
        return Probe(bool(answer), "probe gave no reason")
    return answer


def probe_all(manager: PluginManager, hook_name: str, kind: str, only: str | None = None) -> list[Candidate]:
    """Every candidate of ``hook_name``, probed; with ``only``, just those of that name (a
    probe can import a library as large as torch, and a named choice needs no other)."""
    candidates = []
    for plugin_name, spec in manager.registrations(hook_name):
        if only is not None and spec.name.lower() != only.lower():
            continue
        record = manager.records[plugin_name]
        if not record.usable:
            candidates.append(Candidate(kind, spec.name, plugin_name, spec.priority, False, record.reason, spec))
            continue
        answer = ask(manager, plugin_name, spec.probe)
        candidates.append(Candidate(kind, spec.name, plugin_name, spec.priority, answer.available, answer.reason, spec))
    return candidates


def best(candidates: list[Candidate]) -> Candidate | None:
    """The available candidate with the highest priority (the first registered on a tie)."""
    usable = [c for c in candidates if c.available]
    if not usable:
        return None
    return max(usable, key=lambda c: c.priority)


def detect(manager: PluginManager) -> DetectionReport:
    """Run every platform and cluster-environment probe and pick the winners."""
    platforms = probe_all(manager, "drivetrain_register_platforms", "platform")
    clusters = probe_all(manager, "drivetrain_register_cluster_environments", "cluster-environment")
    return DetectionReport(platforms + clusters, best(platforms), best(clusters))
