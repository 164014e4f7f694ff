"""``drivetrain config``: the questions that write a config file.

The core asks about processes, machines, platform, strategy and precision; every other
question comes from a plugin (``ConfigField(ask=True)`` in the sections it registers), asked
when its section applies (``enabled_when`` matches the chosen distributed type, strategy or
platform). Questions are read line by line from standard input, so a program can answer
them: an empty line takes the default, a choice is given by its name or its number.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from ..kernel.errors import ConfigError
from ..kernel.descriptors import ConfigField
from ..kernel.plugin_manager import PluginManager, get_plugin_manager
from ..selection.enums import enum_text
from .schema import build_schema, coerce

MAX_TRIES = 5
AUTO = "auto"


class Asker:
    """Asks one question at a time on ``output`` and reads the answer from ``input``."""

    def __init__(self, input: IO[str] | None = None, output: IO[str] | None = None) -> None:
        self.input = input or sys.stdin
        self.output = output or sys.stdout
        self.echo = not _is_tty(self.input)  # a program answers: show its answers in the transcript

    def _line(self, prompt: str, question: str) -> str:
        self.output.write(prompt)
        self.output.flush()
        line = self.input.readline()
        if line == "":
            raise ConfigError(f"no answer to {question!r}: standard input ended; answer every question, "
                              "or write a default file with `drivetrain config default`")
        answer = line.strip()
        if self.echo:
            self.output.write(answer + "\n")
        return answer

    def ask(self, spec: ConfigField, question: str | None = None, default: Any = None,
            required: bool = False) -> Any:
        """The answer to the question of ``spec``, checked against its type and choices."""
        question = question or spec.help or spec.name
        default = spec.default if default is None else default
        choices = list(spec.choices) if spec.choices is not None else None
        if choices:
            self.output.write(f"{question}\n")
            for number, choice in enumerate(choices, 1):
                self.output.write(f"  {number}) {choice}\n")
        shown = _shown(default, spec.type)
        prompt = f"{question if not choices else 'Your choice'}" + (f" [{shown}]" if shown else "") + ": "
        for _ in range(MAX_TRIES):
            answer = self._line(prompt, question)
            if answer == "":
                if default is not None or not required:
                    return default
                self.output.write("  an answer is needed\n")
                continue
            if choices and answer.isdigit() and 1 <= int(answer) <= len(choices) and spec.type is not int:
                return choices[int(answer) - 1]
            try:
                return coerce(spec, _parse(answer, spec.type), f"answer {answer!r}")
            except ConfigError as exc:
                self.output.write(f"  {exc}; try again\n")
        raise ConfigError(f"no valid answer to {question!r} after {MAX_TRIES} tries")


def _is_tty(stream: Any) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _shown(default: Any, kind: type) -> str:
    if default is None:
        return ""
    if kind is bool:
        return "yes" if default else "no"
    if isinstance(default, (list, tuple)):
        return ",".join(map(str, default))
    return str(default)


def _parse(answer: str, kind: type) -> Any:
    if kind is list:
        return [part.strip() for part in answer.split(",") if part.strip()]
    if kind is dict:
        import json

        try:
            return json.loads(answer)
        except ValueError:
            raise ConfigError(f"answer {answer!r} is not a JSON object") from None
    return answer


def run_questionnaire(asker: Asker | None = None, manager: PluginManager | None = None) -> dict[str, Any]:
    """Ask every question that applies and return the config file's content (not yet written)."""
    from ..kernel.descriptors import resolve
    from ..selection.choice import CPU_PLATFORM, Requests, choose_platform, platform_for_distributed_type

    asker = asker or Asker()
    manager = manager or get_plugin_manager()
    schema = build_schema(manager)
    usable_platforms = [spec.name for plugin, spec in manager.registrations("drivetrain_register_platforms",
                                                                            usable_only=True)]
    detected, _reason = choose_platform(manager, Requests())
    platform_name = asker.ask(ConfigField("platform", str, AUTO, choices=[AUTO, *usable_platforms]),
                              f"Which platform should runs use? ({AUTO}: detect at run time, "
                              f"here {detected.spec.name})")
    platform_spec = schema.platforms[detected.spec.name if platform_name == AUTO else platform_name]
    if platform_name != AUTO:
        choose_platform(manager, Requests(platform=platform_name))  # refuses one that cannot run here
    data: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE"}
    machines = asker.ask(ConfigField("num_machines", int, 1), "How many machines will take part?")
    if machines < 1:
        raise ConfigError("num_machines must be at least 1")
    data["num_machines"] = machines
    if machines > 1:
        data["machine_rank"] = asker.ask(ConfigField("machine_rank", int, 0), "What is the rank of this machine?")
        data["main_process_ip"] = asker.ask(ConfigField("main_process_ip", str), "What is the IP address of the "
                                            "machine of rank 0?", required=True)
        data["main_process_port"] = asker.ask(ConfigField("main_process_port", int, 29500),
                                              "Which port should the rendezvous use on it?")
        data["rdzv_backend"] = asker.ask(ConfigField("rdzv_backend", str, "static", choices=("static", "c10d")),
                                         "Which rendezvous backend?")
        data["same_network"] = asker.ask(ConfigField("same_network", bool, True),
                                         "Are all machines on the same local network?")
    else:
        data.update(machine_rank=0, rdzv_backend="static", same_network=True)
    per_machine = 1
    if platform_spec.name != CPU_PLATFORM:
        try:
            per_machine = max(int(resolve(platform_spec.factory)().device_count() or 1), 1)
        except Exception:  # a platform that cannot be built here still gets a sensible default
            per_machine = 1
    processes = asker.ask(ConfigField("num_processes", int, machines * per_machine),
                          "How many processes in total, on all machines?")
    data["num_processes"] = processes
    strategy_name = None
    if processes > 1:
        options = ["ddp"] + [spec.name for plugin, spec in manager.registrations("drivetrain_register_strategies",
                                                                                 usable_only=True)
                             if not spec.automatic and (spec.platforms is None or platform_spec.name in spec.platforms)]
        automatic = next((spec.name for _p, spec in manager.registrations("drivetrain_register_strategies",
                                                                          usable_only=True) if spec.automatic), "ddp")
        options[0] = automatic
        strategy_name = asker.ask(ConfigField("strategy", str, automatic, choices=list(dict.fromkeys(options))),
                                  "How should the model be distributed?")
    strategy = schema.strategies.get(strategy_name)
    strategy_spec = strategy[1] if strategy else None
    if strategy_spec is not None and not strategy_spec.automatic and strategy_spec.distributed_type:
        kind = strategy_spec.distributed_type
    elif processes > 1:
        kind = platform_spec.multi_process_type
    else:
        kind = platform_spec.single_process_type
    data["distributed_type"] = kind
    if strategy_spec is not None and not strategy_spec.automatic and not strategy_spec.distributed_type:
        data["strategy"] = strategy_spec.name
    precisions = [p for p in schema.precisions if p == "no" or platform_spec.precisions is None
                  or p in platform_spec.precisions]
    data["mixed_precision"] = asker.ask(ConfigField("mixed_precision", str, "no", choices=precisions),
                                        "Which mixed precision?")
    data["debug"] = asker.ask(ConfigField("debug", bool, False),
                              "Check the shapes of tensors before every collective (slower, finds hangs)?")
    data["use_cpu"] = platform_spec.name == CPU_PLATFORM and platform_name != AUTO
    if platform_name not in (AUTO, CPU_PLATFORM) and platform_for_distributed_type(manager, kind) != platform_name:
        data["platform"] = platform_name
    active = {enum_text(kind).upper(), platform_spec.name.upper(), *([strategy_name.upper()] if strategy_name else [])}
    for key, owner in schema.enabled_plugin_keys(active):
        section = owner.section
        if section is not None:
            answers = {f.name: asker.ask(f) for f in section.fields if f.ask}
            data[key] = {k: v for k, v in answers.items() if v is not None}
        elif owner.field.ask:
            value = asker.ask(owner.field)
            if value is not None:
                data[key] = value
    data["main_training_function"] = "main"
    return data


__all__ = ["Asker", "run_questionnaire"]
