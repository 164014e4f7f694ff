"""``drivetrain env``: everything a bug report needs, ready to paste (or ``--json``)."""

from __future__ import annotations

import argparse
import os
import platform as host_platform
import sys
from typing import Any

from .json_output import emit

REPORT_VERSION = 1


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    env = subparsers.add_parser("env", help="versions, platform, detected environment, config and plugins "
                                             "(paste it into a bug report)")
    env.add_argument("--config-file", "--config_file", dest="config_file", metavar="PATH",
                     help="config file to show (default: the one `drivetrain launch` reads)")
    env.add_argument("--json", action="store_true", help="machine-readable output")
    env.set_defaults(handler=run_env)


def _version(distribution: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


ALIAS_LABEL = "+drivetrain"  # the local version label of the `accelerate` alias distribution (compat/accelerate)


def accelerate_package() -> str:
    """What the name ``accelerate`` is here: drivetrain's alias, Hugging Face Accelerate, both, or nothing."""
    import importlib.metadata

    versions = [str(dist.version) for dist in importlib.metadata.distributions(name="accelerate")]
    alias = [v for v in versions if v.endswith(ALIAS_LABEL)]
    real = [v for v in versions if not v.endswith(ALIAS_LABEL)]
    if alias and real:
        return (f"conflict: the drivetrain alias {alias[0]} and Hugging Face Accelerate {real[0]} are both "
                "installed; `pip uninstall accelerate` until one is left")
    if alias:
        return (f"{alias[0]}, the drivetrain alias: `import accelerate` serves drivetrain's modules and the `accelerate` "
                "command runs `drivetrain`")
    if real:
        return f"{real[0]}, Hugging Face Accelerate (a separate library, not drivetrain)"
    return "not installed"


def _plugin_lines(manager: Any) -> list[dict[str, str]]:
    """Every loaded plugin's ``drivetrain_env_report`` lines; a failing one becomes a line too."""
    from ..kernel.plugin_manager import PluginStatus

    lines = []
    for impl in reversed(manager.hooks.hook.drivetrain_env_report.get_hookimpls()):
        if manager.records[impl.plugin_name].status is PluginStatus.FAILED:
            continue
        try:
            for line in impl.function() or ():
                lines.append({"plugin": impl.plugin_name, "key": line.key, "value": str(line.value)})
        except Exception as exc:
            lines.append({"plugin": impl.plugin_name, "key": "report failed", "value": f"{type(exc).__name__}: {exc}"})
    return lines


def collect(config_file: str | None = None) -> dict[str, Any]:
    """The data of the report (also the ``--json`` output)."""
    from ..selection.detection import detect
    from ..kernel.errors import DrivetrainError
    from ..kernel.plugin_manager import get_plugin_manager
    from ..kernel.version import PLUGIN_API_VERSION, __version__

    manager = get_plugin_manager()
    report: dict[str, Any] = {
        "report_version": REPORT_VERSION,
        "drivetrain_version": __version__,
        "plugin_api_version": PLUGIN_API_VERSION,
        "platform": host_platform.platform(),
        "python_version": host_platform.python_version(),
        "python_executable": sys.executable,
        "numpy_version": _version("numpy"),
        "torch_version": _version("torch"),
        "accelerate": accelerate_package(),
        "cpu_count": os.cpu_count(),
    }
    try:
        import psutil

        report["ram_gib"] = round(psutil.virtual_memory().total / 2**30, 2)
    except Exception:  # optional detail
        pass
    detection = detect(manager)
    report["detection"] = {
        "platform": detection.platform.name if detection.platform else None,
        "platform_reason": detection.platform.reason if detection.platform else None,
        "cluster_environment": detection.cluster_environment.name if detection.cluster_environment else None,
        "candidates": [c.to_json() for c in detection.candidates],
    }
    try:
        from ..selection.choice import requests_from_env, select

        selection = select(manager, requests_from_env(manager))
        report["run_choice"] = {
            "platform": selection.platform.name, "strategy": selection.strategy.name if selection.strategy else None,
            "mixed_precision": selection.mixed_precision, "distributed_type": selection.distributed_type,
            "num_processes": selection.cluster.world_size, "reasons": selection.reasons,
        }
    except DrivetrainError as exc:
        report["run_choice"] = {"error": str(exc)}
    try:
        from ..config import find_config_path, load_config

        config = load_config(config_file)
        path = config.path if config else (str(find_config_path() or "") or None)
        report["config"] = {"path": path, "values": config.to_dict() if config else None}
    except DrivetrainError as exc:
        report["config"] = {"path": config_file, "error": str(exc)}
    report["plugins"] = [
        {"name": r.name, "status": r.status.value, "version": r.version, "source": r.source,
         "kinds": list(r.kinds), "reason": r.reason}
        for r in sorted(manager.records.values(), key=lambda r: (r.source != "built-in", r.name))
    ]
    report["plugin_report"] = _plugin_lines(manager)
    report["environment_variables"] = {
        key: value for key, value in sorted(os.environ.items())
        if key.startswith(("DRIVETRAIN_", "ACCELERATE_")) and not _looks_secret(key)
    }
    return report


def _looks_secret(name: str) -> bool:
    return any(word in name.upper() for word in ("TOKEN", "KEY", "SECRET", "PASSWORD"))


def render(report: dict[str, Any]) -> str:
    """The report as the Markdown list people paste into an issue."""
    out = ["Copy-and-paste the text below in your GitHub issue", ""]
    add = out.append
    add(f"- `drivetrain` version: {report['drivetrain_version']} (plugin API {report['plugin_api_version']})")
    add(f"- Platform: {report['platform']}")
    add(f"- Python version: {report['python_version']} ({report['python_executable']})")
    add(f"- Numpy version: {report['numpy_version']}")
    add(f"- PyTorch version: {report['torch_version']}")
    add(f"- accelerate: {report['accelerate']}")
    add(f"- CPUs: {report['cpu_count']}" + (f", RAM: {report['ram_gib']} GiB" if "ram_gib" in report else ""))
    detection = report["detection"]
    add(f"- Detected platform: {detection['platform'] or 'none'}"
        + (f" ({detection['platform_reason']})" if detection["platform_reason"] else ""))
    add(f"- Cluster environment: {detection['cluster_environment'] or 'none (single process)'}")
    choice = report["run_choice"]
    if "error" in choice:
        add(f"- Run choice: cannot be made here: {choice['error']}")
    else:
        add(f"- Run choice: platform {choice['platform']}, distributed type {choice['distributed_type']}, "
            f"strategy {choice['strategy'] or 'none'}, mixed precision {choice['mixed_precision']}, "
            f"{choice['num_processes']} process(es)")
    config = report["config"]
    if "error" in config:
        add(f"- `drivetrain` config: unreadable: {config['error']}")
    elif config["values"] is None:
        add("- `drivetrain` config: none found (write one with `drivetrain config`)")
    else:
        add(f"- `drivetrain` config ({config['path']}):")
        for key, value in config["values"].items():
            add(f"\t- {key}: {value}")
    if report["plugin_report"]:
        add("- Plugin details:")
        for line in report["plugin_report"]:
            add(f"\t- {line['plugin']}: {line['key']}: {line['value']}")
    add("- Installed plugins:")
    for plugin in report["plugins"]:
        note = f" ({plugin['reason']})" if plugin["reason"] else ""
        add(f"\t- {plugin['name']} {plugin['version']}: {plugin['status']}, {plugin['source']}{note}")
    variables = report["environment_variables"]
    add("- Environment variables: " + ("none set" if not variables else ""))
    for key, value in variables.items():
        add(f"\t- {key}={value}")
    return "\n".join(out)


def run_env(args: argparse.Namespace) -> int:
    report = collect(args.config_file)
    if args.json:
        emit(report, default=str)
    else:
        print(render(report))
    return 0
