"""Checks of what ``init_trackers`` is given, made before any tracker is created.

File-writing trackers put their files under ``<logging_dir>/<project_name>``; a project name
that is absolute or climbs with ``..`` would write outside the run's logging directory, so it
is refused rather than silently kept inside (a changed destination would surprise the user
as much as an escaped one). Names with subfolders (``"group/run"``) stay inside and are kept.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..kernel.errors import ConfigError

logger = logging.getLogger("drivetrain.tracking")


def check_project_name(project_name: Any) -> str:
    """``project_name`` as a string, or a ``ConfigError`` when it could leave the logging directory."""
    if isinstance(project_name, os.PathLike):
        project_name = os.fspath(project_name)
    if not isinstance(project_name, str):
        raise ConfigError(f"init_trackers(project_name={project_name!r}): the project name must be a string "
                          "like 'my_project'")
    if not project_name.strip():
        raise ConfigError("init_trackers(project_name=''): give the project a name like 'my_project'")
    if "\x00" in project_name or any(ord(c) < 32 for c in project_name):
        raise ConfigError(f"init_trackers(project_name={project_name!r}): the project name holds a control "
                          "character (NUL, line break); remove it")
    parts = project_name.replace("\\", "/").split("/")
    if os.path.isabs(project_name) or project_name.startswith(("/", "\\")) or os.path.splitdrive(project_name)[0]:
        raise ConfigError(f"init_trackers(project_name={project_name!r}) is an absolute path, and trackers would "
                          "write outside the logging directory: pass a name like 'my_project' and choose the "
                          "folder with ProjectConfiguration(logging_dir=...)")
    if ".." in parts:
        raise ConfigError(f"init_trackers(project_name={project_name!r}) climbs out of the logging directory "
                          "with '..': pass a name like 'my_project' and choose the folder with "
                          "ProjectConfiguration(logging_dir=...)")
    return project_name


def check_logging_dir(logging_dir: str | None) -> None:
    """A ``ConfigError`` when the logging directory cannot hold tracker files."""
    if logging_dir is None:
        return
    if "\x00" in logging_dir:
        raise ConfigError(f"the logging directory {logging_dir!r} holds a NUL character; remove it")
    if os.path.exists(logging_dir) and not os.path.isdir(logging_dir):
        raise ConfigError(f"the logging directory {logging_dir} is a file, not a directory: pass another "
                          "Accelerator(project_dir=...) or ProjectConfiguration(logging_dir=...)")


def check_init_kwargs(init_kwargs: Any, selected: Iterable[str], warn: bool = True) -> dict[str, dict[str, Any]]:
    """``init_kwargs`` as a dict of dicts; a warning names those for trackers not in ``log_with``.

    Accelerate ignores them silently; they are only warned about (not refused) because scripts
    commonly pass the keyword arguments of every tracker they support whatever ``log_with`` is.
    """
    if init_kwargs is None:
        return {}
    if not isinstance(init_kwargs, Mapping):
        raise ConfigError(f"init_kwargs={init_kwargs!r} is not a dict of tracker name to keyword arguments, "
                          "like {'wandb': {'entity': 'me'}}")
    checked = {}
    for name, kwargs in init_kwargs.items():
        if not isinstance(name, str) or not isinstance(kwargs, Mapping):
            raise ConfigError(f"init_kwargs[{name!r}]={kwargs!r}: init_kwargs maps a tracker name to a dict of "
                              "keyword arguments, like {'wandb': {'entity': 'me'}}")
        bad = [key for key in kwargs if not isinstance(key, str)]
        if bad:
            raise ConfigError(f"init_kwargs[{name!r}] has the key {bad[0]!r}, which is not a keyword name")
        checked[name] = dict(kwargs)
    wanted = {name.lower() for name in selected}
    unused = sorted(name for name in checked if name.lower() not in wanted)
    if unused and warn:
        logger.warning("init_kwargs for %s not used: not in log_with (%s)", ", ".join(map(repr, unused)),
                       ", ".join(sorted(wanted)) or "none")
    return checked
