"""``drivetrain launch``: start a script on every process of a job.

The core parses the options (its own, the config file's and those plugins add), resolves the
run's plugins once, and hands the job to the launcher plugin that applies (torchrun by
default). Children learn the resolved choice from ``DRIVETRAIN_*`` variables.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from typing import Any, Sequence

from ..kernel import environment
from ..kernel.errors import ConfigError, LaunchError
from ..runtime.worker_lifetime import LAUNCHER_VARIABLE, launcher_identity
from ..services.launchers import DEFAULT_PREEMPTION_GRACE
from . import launch_checks
from .launch_parser import LaunchParser

# Options whose value the children read from a DRIVETRAIN_* variable.
_CHILD_VARIABLES = {
    "mixed_precision": "MIXED_PRECISION",
    "gradient_accumulation_steps": "GRADIENT_ACCUMULATION_STEPS",
    "dynamo_backend": "DYNAMO_BACKEND",
    "dynamo_mode": "DYNAMO_MODE",
    "dynamo_use_fullgraph": "DYNAMO_USE_FULLGRAPH",
    "dynamo_use_dynamic": "DYNAMO_USE_DYNAMIC",
    "dynamo_use_regional_compilation": "DYNAMO_USE_REGIONAL_COMPILATION",
    "timeout": "TIMEOUT",
}


def _configure(parser: argparse.ArgumentParser) -> None:
    hardware = parser.add_argument_group("Hardware and precision")
    hardware.add_argument("--cpu", action="store_true", default=False, help="run on the CPU even if an accelerator is present")
    hardware.add_argument("--platform", help="platform plugin to use (see `drivetrain plugins list`)")
    hardware.add_argument("--strategy", help="strategy to use (ddp, or one a plugin offers)")
    hardware.add_argument("--mixed-precision", help="no, fp16, bf16, or a precision a plugin offers")
    hardware.add_argument("--gradient-accumulation-steps", type=int)
    hardware.add_argument("--dynamo-backend", help="torch.compile backend for prepared models")
    hardware.add_argument("--dynamo-mode", help="torch.compile mode")
    hardware.add_argument("--dynamo-use-fullgraph", action="store_true", default=None)
    hardware.add_argument("--dynamo-use-dynamic", action="store_true", default=None)
    hardware.add_argument("--dynamo-use-regional-compilation", action="store_true", default=None)
    hardware.add_argument("--debug", action="store_true", default=None, help="check shapes before every collective")
    resources = parser.add_argument_group("Processes and machines")
    resources.add_argument("--config-file", help="config file to read (default: `drivetrain config`'s)")
    resources.add_argument("--num-processes", type=int, help="total number of processes, on all machines")
    resources.add_argument("--num-machines", type=int)
    resources.add_argument("--machine-rank", type=int)
    resources.add_argument("--main-process-ip")
    resources.add_argument("--main-process-port", type=int)
    resources.add_argument("--rdzv-backend", help="rendezvous: " + ", ".join(launch_checks.RDZV_BACKENDS)
                           + " (default static)")
    resources.add_argument("--rdzv-conf", help="extra rendezvous options, key=value,...")
    resources.add_argument("--rdzv-timeout", type=float, default=launch_checks.DEFAULT_RDZV_TIMEOUT,
                           help="seconds each machine waits to meet the others before the launch stops "
                                f"(default {launch_checks.DEFAULT_RDZV_TIMEOUT})")
    resources.add_argument("--max-restarts", type=int, default=0)
    resources.add_argument("--monitor-interval", type=float, default=0.1)
    resources.add_argument("--timeout", type=float, help="seconds before a collective a peer never joins fails")
    resources.add_argument("--preemption-grace", type=float,
                           help="seconds the workers get to end (save a checkpoint) after a signal passed on to "
                                "them, before they are killed (default DRIVETRAIN_PREEMPTION_GRACE, else "
                                f"{DEFAULT_PREEMPTION_GRACE:g})")
    resources.add_argument("--same-network", action="store_true", default=None)
    resources.add_argument("--log-dir", help="directory where each rank's output is kept")
    resources.add_argument("--tee", default="0", help="also copy rank outputs to log files (0,1,2,3)")
    resources.add_argument("--role", help="name of the workers' role in the elastic agent's logs")
    resources.add_argument("--num-cpu-threads-per-process", type=int,
                           help="OMP_NUM_THREADS of each process (torchrun's default is 1)")
    resources.add_argument("-q", "--quiet", action="store_true", default=None,
                           help="only errors from the launcher and its agent (no start-up notes)")
    script = parser.add_argument_group("What to run")
    script.add_argument("-m", "--module", action="store_true", help="run the target as a module (python -m)")
    script.add_argument("--no-python", action="store_true", help="the target is an executable, not a Python script")
    parser.add_argument("training_script", help="the script (or module) to run")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER, help="its own arguments")


def build_parser(prog: str = "drivetrain launch") -> LaunchParser:
    from ..kernel.plugin_manager import get_plugin_manager

    parser = LaunchParser(prog=prog, description="Launch a script on every process of a job. Options may be written "
                                                 "with underscores or hyphens: --num_processes 2 or --num-processes 2.")
    _configure(parser)
    _add_plugin_arguments(parser, get_plugin_manager())
    return parser


def fill_missing_options(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """Give ``args`` the parser's default for every option it lacks.

    Libraries build the namespace by hand (``argparse.Namespace(num_processes=2, ...)``) with
    the options of their Accelerate version; what they leave out is what the command line
    would have left at its default.
    """
    parser = parser or build_parser()
    for action in parser._actions:
        if action.dest in (argparse.SUPPRESS, "help") or action.default is argparse.SUPPRESS:
            continue
        if not hasattr(args, action.dest):
            setattr(args, action.dest, copy.copy(action.default))
    return args


def _add_plugin_arguments(parser: LaunchParser, manager: Any) -> None:
    """Each plugin adds its own group; one that breaks the parser is reported and left out."""
    from ..kernel.plugin_manager import PluginStatus

    for impl in reversed(manager.hooks.hook.drivetrain_add_launch_arguments.get_hookimpls()):
        if manager.records[impl.plugin_name].status is PluginStatus.FAILED:
            continue
        try:
            impl.function(parser=parser)
        except (argparse.ArgumentError, ValueError, TypeError) as exc:
            print(f"warning: plugin {impl.plugin_name!r} could not add its launch options: {exc}", file=sys.stderr)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    # Listed for --help only: main() hands `launch` its raw arguments (see run()).
    subparsers.add_parser("launch", help="run a script on every process of a job (see `drivetrain launch --help`)")


# Options that are part of the run's choice: the command line beats environment variables,
# which beat the config file (see requests_for()). They are not filled from the file here.
_CHOICE_OPTIONS = ("cpu", "platform", "strategy", "mixed_precision")


def merge_config(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """Fill the options not given on the command line from the config file.

    Core options come from the core keys; an option a plugin added is filled from the key
    of the same name (top level, or inside the plugin's block). The file itself stays in
    ``args.config`` for plugins that read more of their block.
    """
    from ..config import load_config

    config = load_config(args.config_file)
    args.config = config
    if config is None:
        return args
    fill = {
        "num_processes": config.num_processes, "num_machines": config.num_machines,
        "machine_rank": config.machine_rank, "main_process_ip": config.main_process_ip,
        "main_process_port": config.main_process_port, "rdzv_backend": config.rdzv_backend,
        "debug": config.debug, "same_network": config.same_network,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
    }
    dynamo = config.dynamo_config or {}
    if str(dynamo.get("dynamo_backend") or "no").lower() not in ("no", "none"):
        for key in ("dynamo_backend", "dynamo_mode", "dynamo_use_fullgraph", "dynamo_use_dynamic",
                    "dynamo_use_regional_compilation"):
            fill[key] = dynamo.get(key)
    for key, value in fill.items():
        if getattr(args, key, None) is None and value is not None:
            setattr(args, key, value)
    if parser is not None:
        plugin_values: dict[str, Any] = {}
        for key, value in config.sections.items():
            if isinstance(value, dict):
                for inner, inner_value in value.items():
                    plugin_values.setdefault(inner, inner_value)
            else:
                plugin_values[key] = value
        for action in parser._actions:
            dest = action.dest
            # a plugin option left at its default (None, or the value Accelerate's launcher uses)
            # takes the file's value, as Accelerate's launcher does
            if dest in plugin_values and dest not in _CHOICE_OPTIONS and getattr(args, dest, None) in (None, action.default):
                setattr(args, dest, plugin_values[dest])
    return args


def _installed_precisions(manager: Any) -> list[str]:
    return ["no", *dict.fromkeys(spec.name for _p, spec in manager.registrations("drivetrain_register_precisions"))]


def requests_for(args: argparse.Namespace, manager: Any) -> Any:
    """The run's choice as asked: command line, then environment variables, then the file."""
    from ..selection.choice import Requests, requests_from_config, requests_from_env

    command_line = Requests(platform=args.platform, cpu=args.cpu or None, strategy=args.strategy,
                            mixed_precision=args.mixed_precision,
                            precision_backend=getattr(args, "precision_backend", None))  # a plugin's option
    return command_line.merged_over(requests_from_env(manager)).merged_over(
        requests_from_config(manager, getattr(args, "config", None)))


def _default_num_processes(args: argparse.Namespace, manager: Any, requests: Any) -> int:
    """One process per device of the chosen platform on each machine (one on the CPU)."""
    from ..selection.choice import CPU_PLATFORM, choose_platform

    machines = args.num_machines or 1
    candidate, _reason = choose_platform(manager, requests)
    if candidate.spec.name == CPU_PLATFORM:
        return machines
    platform = manager.construct(candidate.plugin, candidate.spec, f"platform {candidate.name!r}")
    return machines * max(int(platform.device_count() or 1), 1)


def _defaults(args: argparse.Namespace) -> None:
    args.num_machines = 1 if args.num_machines is None else args.num_machines
    args.num_processes = args.num_machines if args.num_processes is None else args.num_processes
    args.machine_rank = args.machine_rank or 0
    args.rdzv_backend = args.rdzv_backend or "static"
    if args.num_processes < 1 or args.num_machines < 1:
        raise ConfigError("--num-processes and --num-machines must be at least 1")
    if args.num_processes % args.num_machines:
        raise ConfigError(
            f"--num-processes {args.num_processes} is not a multiple of --num-machines {args.num_machines}; "
            "num_processes counts every process on every machine"
        )
    if args.num_machines > 1 and not args.main_process_ip:
        raise ConfigError("several machines need --main-process-ip (the address of machine 0)")
    if not 0 <= args.machine_rank < args.num_machines:
        raise ConfigError(f"--machine-rank {args.machine_rank} is outside 0..{args.num_machines - 1}")
    args.nproc_per_node = args.num_processes // args.num_machines


def resolve_choice(args: argparse.Namespace, manager: Any, requests: Any = None) -> Any:
    """Make the run's choice once, for the whole job, and write it back into ``args``."""
    from ..kernel.cluster import ClusterEnvironment
    from ..selection.choice import select

    requests = requests if requests is not None else requests_for(args, manager)
    job = ClusterEnvironment(name="launch", world_size=args.num_processes)
    selection = select(manager, requests, cluster=job)
    args.platform = selection.platform.name
    args.strategy = selection.strategy.name if selection.strategy else None
    args.mixed_precision = selection.mixed_precision
    args.cpu = bool(requests.cpu)
    args.selection = selection
    return selection


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _section_environment(args: argparse.Namespace, manager: Any, selection: Any) -> dict[str, str]:
    """Variables of the plugin config keys that name one (``ConfigField.env``), for the enabled
    sections of usable plugins. A variable already set by the user wins over the file."""
    from ..config.schema import build_schema
    from ..kernel.environment import own_name

    config = getattr(args, "config", None)
    if config is None:
        return {}
    active = {selection.distributed_type.upper(), selection.platform.name.upper()}
    if selection.strategy is not None:
        active.add(selection.strategy.name.upper())
        # a strategy that composes another (a mesh sharding with it) reads that one's block too
        composed = set(selection.strategy.composes_arguments)
        for _plugin, spec in manager.registrations("drivetrain_register_strategies"):
            if composed & set(spec.accelerator_arguments):
                active.update(name.upper() for name in (spec.name, spec.distributed_type) if name)
    env: dict[str, str] = {}
    for key, owner in build_schema(manager).enabled_plugin_keys(active):
        section = owner.section
        if section is not None:
            block = config.sections.get(key) or {}
            pairs = [(f, block.get(f.name)) for f in section.fields]
        else:
            pairs = [(owner.field, config.sections.get(key))]
        for spec, value in pairs:
            if not spec.env or value is None:
                continue
            given = getattr(args, spec.name, None)
            if given is None and (spec.env in os.environ or own_name(spec.env) in os.environ):
                continue
            text = _text(given if given is not None else value)
            env[spec.env] = text
            env[own_name(spec.env)] = text
    return env


def child_environment(args: argparse.Namespace, selection: Any = None) -> dict[str, str]:
    """The variables every child gets: the resolved choice (same on every rank) and options."""
    from ..kernel.plugin_manager import get_plugin_manager

    manager = get_plugin_manager()
    if selection is None:
        selection = getattr(args, "selection", None) or resolve_choice(args, manager)
    env = dict(selection.child_environment())
    if args.cpu:
        env["DRIVETRAIN_USE_CPU"] = "1"
    if args.debug:
        env["DRIVETRAIN_DEBUG_MODE"] = "1"
    if getattr(args, "num_cpu_threads_per_process", None):
        env["OMP_NUM_THREADS"] = str(args.num_cpu_threads_per_process)
    for option, key in _CHILD_VARIABLES.items():
        value = getattr(args, option, None)
        if value is not None and f"DRIVETRAIN_{key}" not in env:
            env[f"DRIVETRAIN_{key}"] = _text(value)
    if getattr(args, "config", None) is not None and args.config.path:
        env["DRIVETRAIN_CONFIG_FILE"] = args.config.path
    env.update(_section_environment(args, manager, selection))
    contributed: dict[str, tuple[str, str]] = {}
    for impl in manager.hooks.hook.drivetrain_launch_environment.get_hookimpls():
        if not manager.records[impl.plugin_name].usable:
            continue
        try:
            variables = impl.function(args=args) or {}
        except Exception as exc:
            _skip_or_raise(manager, selection, impl.plugin_name, "drivetrain_launch_environment", exc)
            continue
        for key, value in variables.items():
            if key in contributed and contributed[key][1] != str(value):
                raise ConfigError(f"plugins {contributed[key][0]!r} and {impl.plugin_name!r} both set {key} "
                                  f"({contributed[key][1]!r} vs {value!r}); block one of them")
            contributed[key] = (impl.plugin_name, str(value))
    env.update({key: value for key, (_plugin, value) in contributed.items()})
    # Accelerate's scripts and libraries read these names: keep them in step.
    for key in list(env):
        if key.startswith("DRIVETRAIN_") and key not in ("DRIVETRAIN_CONFIG_FILE",):
            env["ACCELERATE_" + key[len("DRIVETRAIN_"):]] = env[key]
    return env


def _skip_or_raise(manager: Any, selection: Any, plugin: str, where: str, exc: Exception) -> None:
    """A third-party plugin's launch code raised: skip it with a warning, unless the user
    selected it (named in ``DRIVETRAIN_PLUGINS``, or its platform, strategy or precision
    chosen), then stop with the error naming it. A built-in plugin's error is raised as is."""
    from ..kernel.plugin_manager import EXPLICIT_PLUGINS_VARIABLE

    failure = manager.fault(plugin, where, exc)
    if failure is None:
        raise exc
    selected = {name.strip() for name in os.environ.get(EXPLICIT_PLUGINS_VARIABLE, "").split(",")}
    if selection is not None:
        selected.update(selection.plugin_names())
    if plugin in selected:
        raise failure from exc
    manager.warn(f"{failure}; the plugin was left out of this launch")


def choose_launcher(args: argparse.Namespace):
    from ..kernel.plugin_manager import get_plugin_manager

    manager = get_plugin_manager()
    candidates = []
    for plugin, spec in manager.registrations("drivetrain_register_launchers", usable_only=True):
        try:
            applies = spec.applies(args)
        except Exception as exc:
            _skip_or_raise(manager, getattr(args, "selection", None), plugin, f"launcher {spec.name!r} applies()", exc)
            continue
        if applies:
            candidates.append((spec.priority, plugin, spec))
    if not candidates:
        raise LaunchError("no launcher plugin applies to this job; see `drivetrain plugins list`")
    _priority, plugin, spec = max(candidates, key=lambda item: item[0])
    return spec.name, manager.resolve_factory(plugin, spec, f"launcher {spec.name!r}")


def run(argv: Sequence[str]) -> int:
    parser = build_parser()
    return launch_parsed(parser.parse_args(list(argv)), parser)


def launch_parsed(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    """Run the job that parsed ``drivetrain launch`` arguments describe."""
    from ..kernel.plugin_manager import get_plugin_manager

    manager = get_plugin_manager()
    parser = parser or build_parser()
    given = launch_checks.given_on_command_line(args)
    launch_checks.check_numbers(args, given)  # the command line's mistakes first, before reading the file
    merge_config(args, parser)
    launch_checks.check_numbers(args, given)
    launch_checks.check_choices(args, given)
    launch_checks.check_rendezvous(args, given)
    launch_checks.check_log_dir(args)
    launch_checks.check_precision(args, _installed_precisions(manager))
    launch_checks.check_target(args)
    requests = requests_for(args, manager)
    if args.num_processes is None:
        args.num_processes = _default_num_processes(args, manager, requests)
    _defaults(args)
    launch_checks.check_port_free(args, given)
    selection = resolve_choice(args, manager, requests)
    env = child_environment(args, selection)
    environment.check_variables({**os.environ, **env})  # what every child would read, checked once here
    name, launch = choose_launcher(args)
    for key, value in env.items():
        os.environ[key] = value
    os.environ[LAUNCHER_VARIABLE] = launcher_identity()  # workers end with this process (worker_lifetime)
    try:
        return int(launch(args) or 0)
    except KeyboardInterrupt:
        print("drivetrain launch: interrupted", file=sys.stderr)
        return 130
