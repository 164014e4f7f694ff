"""What is installed: distributions' names and versions, and whether requirements are met.

Plugin discovery runs in every process and asks this for every plugin, so it reads as little
as it can: the two header lines of a distribution's metadata rather than the whole file (long
description included, through the email package), and a plain requirement (``"wandb>=0.17"``)
with a version comparison rather than packaging's requirement parser, imported only for the
other forms. Nothing here imports torch.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata as importlib_metadata
from typing import Any, Iterable

from packaging.version import InvalidVersion, Version


# A requirement that is a name with at most plain version clauses: enough to tell that its
# distribution is missing without parsing it fully (packaging's parser is costly to import).
_SIMPLE_REQUIREMENT = re.compile(
    r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*"
    r"((?:(?:~=|==|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*)(?:,\s*(?:~=|==|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*)*)?"
)


def missing_requirements(requires: Iterable[str]) -> list[str]:
    """The requirement strings that the installed distributions do not satisfy."""
    missing = []
    for text in requires:
        simple = _SIMPLE_REQUIREMENT.fullmatch(text)
        if simple is not None:
            installed = installed_version(simple.group(1))
            if installed is None:
                missing.append(f"{simple.group(1)} (not installed)")
                continue
            if not simple.group(2):
                continue
            at_least = simple.group(2).strip()
            if at_least.startswith(">=") and "," not in at_least and "*" not in at_least:
                try:  # the usual form; ">=" of packaging's specifiers is this comparison
                    if Version(installed) < Version(at_least[2:].strip()):
                        missing.append(f"{simple.group(1)}{at_least.replace(' ', '')} (found {installed})")
                    continue
                except InvalidVersion:
                    pass
            from packaging.specifiers import InvalidSpecifier, SpecifierSet

            try:
                specifier = SpecifierSet(simple.group(2))
            except InvalidSpecifier:
                specifier = None  # packaging's parser below says what is wrong
            if specifier is not None:
                if not specifier.contains(installed, prereleases=True):
                    missing.append(f"{simple.group(1)}{specifier} (found {installed})")
                continue
        from packaging.requirements import InvalidRequirement, Requirement

        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            missing.append(f"{text} (not a valid requirement)")
            continue
        installed = installed_version(requirement.name)
        if installed is None:
            missing.append(f"{requirement.name} (not installed)")
            continue
        if requirement.specifier and not requirement.specifier.contains(installed, prereleases=True):
            missing.append(f"{requirement} (found {installed})")
    return missing


_versions: dict[str, Any] = {}  # normalised name -> version or None; "" -> the sys.path it was read with


def installed_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (``None`` when absent), asked once per
    process: every run checks the same few dozen requirements, and each look-up reads metadata."""
    key = re.sub(r"[-_.]+", "-", name).lower()
    if _versions.get("", ()) != sys.path:  # a directory added to the path may hold more distributions
        _versions.clear()
        _versions[""] = list(sys.path)
    if key not in _versions:
        # ``distribution(name)`` parses every candidate's whole metadata to prefer a valid one;
        # the first whose headers give a version is that one
        _versions[key] = next(filter(None, (distribution_name_and_version(dist)[1]
                                            for dist in importlib_metadata.distributions(name=name))), None)
    return _versions[key]


def distribution_name_and_version(dist: Any) -> tuple[str | None, str | None]:
    """(Name, Version) of an installed distribution, read from its metadata's headers.

    ``dist.name`` and ``dist.version`` parse the whole metadata file, long description
    included, with the email package: reading the two header lines costs a fraction of that.
    """
    name = version = None
    read_text = getattr(dist, "read_text", None)
    try:
        text = (read_text("METADATA") or read_text("PKG-INFO")) if read_text is not None else None
    except Exception:  # a distribution of an odd kind: ask it the usual way below
        text = None
    for line in (text or "").partition("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        if key == "Name" and name is None:
            name = value.strip()
        elif key == "Version" and version is None:
            version = value.strip()
    if name is None:
        name = getattr(dist, "name", None) or getattr(dist, "metadata", {}).get("Name", "")
    if version is None:
        version = getattr(dist, "version", None)
    return name, version


def forget_versions() -> None:
    """Ask the installed versions again from now on (something was installed)."""
    _versions.clear()
