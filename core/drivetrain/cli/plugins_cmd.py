"""``drivetrain plugins list|info``: what is installed, what is active, and why not."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..kernel.errors import PluginLoadError
from ..kernel.descriptors import ConfigSection
from ..kernel.plugin_manager import STRICT_VARIABLE, PluginManager, PluginRecord, PluginStatus, get_plugin_manager
from ..kernel.version import PLUGIN_API_VERSION, __version__
from .json_output import emit

JSON_SCHEMA_VERSION = 1


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    plugins = subparsers.add_parser("plugins", help="list and inspect installed plugins")
    actions = plugins.add_subparsers(dest="plugins_command", metavar="ACTION")
    listing = actions.add_parser("list", help="one row per installed plugin")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.add_argument(
        "--detect",
        action="store_true",
        help="also run every environment probe and show what would be chosen (imports torch)",
    )
    listing.set_defaults(handler=run_list)
    info = actions.add_parser("info", help="everything known about one plugin")
    info.add_argument("name")
    info.add_argument("--json", action="store_true")
    info.set_defaults(handler=run_info)
    plugins.set_defaults(handler=lambda args: (plugins.print_help(), 0)[1])


def listing(manager: PluginManager, detect: bool) -> dict[str, Any]:
    """The data behind ``plugins list``; its shape is versioned by ``schema_version``."""
    report = None
    if detect:
        from ..selection.detection import detect as run_detection

        report = run_detection(manager)
        winners = [c.plugin for c in (report.platform, report.cluster_environment) if c]
        manager.mark_active(winners)
    data: dict[str, Any] = {
        "schema_version": JSON_SCHEMA_VERSION,
        "drivetrain_version": __version__,
        "plugin_api_version": PLUGIN_API_VERSION,
        "plugins": [r.to_json() for r in sorted(manager.records.values(), key=_order)],
    }
    if report is not None:
        data["detection"] = report.to_json()
    return data


def _order(record: PluginRecord) -> tuple:
    return (record.source != "built-in", record.name)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _strict_exit(manager: PluginManager) -> int:
    """After listing everything: 1 with one line per problem in strict mode, else 0."""
    try:
        manager.raise_if_strict()
    except PluginLoadError:
        for record in manager.problems():
            print(f"drivetrain: error: plugin {record.name!r} is {record.status}: {record.reason}", file=sys.stderr)
        print(f"drivetrain: error: {len(manager.problems())} plugin problem(s) and {STRICT_VARIABLE}=1",
              file=sys.stderr)
        return 1
    return 0


def run_list(args: argparse.Namespace) -> int:
    manager = get_plugin_manager(check_strict=False)
    data = listing(manager, args.detect)
    if args.json:
        emit(data)
        return _strict_exit(manager)
    rows = [["NAME", "STATUS", "SOURCE", "KINDS", "VERSION", "NOTE"]]
    for plugin in data["plugins"]:
        note = plugin["reason"] or plugin["description"]
        rows.append(
            [plugin["name"], plugin["status"], plugin["source"], ",".join(plugin["kinds"]) or "-",
             plugin["version"], note]
        )
    print(_table(rows))
    counts: dict[str, int] = {}
    for plugin in data["plugins"]:
        counts[plugin["status"]] = counts.get(plugin["status"], 0) + 1
    print("\n" + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    if "detection" in data:
        print("\nDetection (highest priority among available wins):")
        rows = [["KIND", "NAME", "PLUGIN", "PRIORITY", "ANSWER", "REASON"]]
        for c in data["detection"]["candidates"]:
            rows.append([c["kind"], c["name"], c["plugin"], str(c["priority"]), "yes" if c["available"] else "no", c["reason"]])
        print(_table(rows))
        print(f"\nplatform: {data['detection']['platform'] or 'none'}")
        print(f"cluster environment: {data['detection']['cluster_environment'] or 'none (single process)'}")
    return _strict_exit(manager)


def _labels(item: Any) -> list[str]:
    """How one registered item is named in ``plugins info``: a descriptor's name, a config
    block's key, a contributed name's key, an enumeration's members (``RNGType.XLA``)."""
    if isinstance(item, str):
        return [item]
    if isinstance(item, tuple) and len(item) == 2:  # one (key, value) of a mapping hook
        key, value = item
        if isinstance(value, dict):
            return [f"{key}.{member}" for member in value]
        if isinstance(value, (list, tuple)):
            return [f"{key}.{str(member).upper().replace('-', '_')}" for member in value]
        return [str(key)]
    name = getattr(item, "name", None)
    if isinstance(name, str):
        return [name]
    if isinstance(item, ConfigSection):
        return [item.key or "top-level " + "/".join(field.name for field in item.fields)]
    return [type(item).__name__]


def run_info(args: argparse.Namespace) -> int:
    manager = get_plugin_manager(check_strict=False)
    record = manager.records.get(args.name)
    if record is None:
        known = ", ".join(sorted(manager.records))
        print(f"drivetrain: error: no plugin named {args.name!r}; installed: {known}")
        return 2
    data = record.to_json()
    data["provides"] = {
        hook: [label for _p, item in pairs for label in _labels(item)]
        for hook, pairs in (
            (hook, [(p, i) for p, i in manager.registrations(hook) if p == record.name])
            for hook in manager._registrations
        )
        if pairs
    }
    # Role classes are imported only when their item is chosen: show where they live.
    roles = {" ".join(dict.fromkeys(filter(None, (item.name, getattr(item, "backend", None))))):
             [item.hooks if isinstance(item.hooks, str) else repr(item.hooks)]
             for hook in ("drivetrain_register_strategies", "drivetrain_register_precisions")
             for plugin, item in manager.registrations(hook) if plugin == record.name and item.hooks is not None}
    if roles:
        data["role_classes"] = roles
    if args.json:
        emit(data)
        return 0
    for key, value in data.items():
        if isinstance(value, list):
            value = ", ".join(map(str, value)) or "-"
        elif isinstance(value, dict):
            value = "; ".join(f"{k.removeprefix('drivetrain_')}: {', '.join(v)}" for k, v in value.items()) or "-"
        print(f"{key + ':':14} {value if value not in (None, '') else '-'}")
    return 0


__all__ = ["add_parser", "listing", "PluginStatus"]
