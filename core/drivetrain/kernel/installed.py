"""What is installed: distributions' names and versions, their entry points, and whether
requirements are met.

Plugin discovery runs in every process and asks this for every plugin, so it reads as little
as it can. The distributions on ``sys.path`` are found with one directory listing per path
entry, as ``importlib.metadata`` finds them (the first distribution of a name counts), but
without it: it imports the email package, wraps every file in a ``pathlib`` object and
reads every distribution's ``entry_points.txt`` through them, which cost more than the rest
of discovery. Path entries it alone can read (zip files, eggs) and distributions that other
finders provide are still asked through it. A distribution's name and version come from
the two header lines of its metadata rather than the whole file (long description
included), and a plain requirement (``"wandb>=0.17"``) is checked by comparing release
numbers rather than through packaging, imported only for the other forms. Nothing here
imports torch.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Iterable, Iterator

from .descriptors import resolve


class InstalledDistribution:
    """A distribution installed in a directory of ``sys.path``: its ``.dist-info`` (or
    ``.egg-info``) folder, read on demand. Answers what discovery asks of an
    ``importlib.metadata.Distribution``: ``read_text``, its headers, ``metadata``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read_text(self, filename: str) -> str | None:
        try:
            with open(os.path.join(self.path, filename), encoding="utf-8") as file:
                return file.read()
        except (OSError, UnicodeDecodeError):
            return None

    def headers(self) -> tuple[str | None, str | None]:
        """(Name, Version) from the metadata's header lines, reading no further."""
        for filename in ("METADATA", "PKG-INFO"):
            try:
                with open(os.path.join(self.path, filename), encoding="utf-8") as file:
                    return _name_and_version(file)
            except (OSError, UnicodeDecodeError):
                continue
        return None, None

    @property
    def metadata(self) -> Any:
        """The whole metadata, parsed as ``importlib.metadata`` parses it (rarely wanted)."""
        import pathlib
        from importlib import metadata as importlib_metadata

        return importlib_metadata.PathDistribution(pathlib.Path(self.path)).metadata

    def __repr__(self) -> str:
        return f"InstalledDistribution({self.path!r})"


class InstalledEntryPoint:
    """One ``name = module:attribute`` line of a distribution's ``entry_points.txt``; loads as
    ``importlib.metadata.EntryPoint.load`` does."""

    __slots__ = ("name", "value", "group", "dist")

    def __init__(self, name: str, value: str, group: str, dist: Any) -> None:
        self.name, self.value, self.group, self.dist = name, value, group, dist

    @property
    def module(self) -> str:
        return self.value.partition(":")[0].strip()

    @property
    def attr(self) -> str:
        return self.value.partition(":")[2].partition("[")[0].strip()

    def load(self) -> Any:
        return resolve(f"{self.module}:{self.attr}")

    def __repr__(self) -> str:
        return f"InstalledEntryPoint(name={self.name!r}, value={self.value!r}, group={self.group!r})"


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _foreign_finders() -> list[Any]:
    """Meta-path finders other than the standard path finder that provide distributions."""
    from importlib.machinery import PathFinder

    return [finder for finder in sys.meta_path
            if finder is not PathFinder and callable(getattr(finder, "find_distributions", None))]


def installed_distributions() -> Iterator[tuple[str, Any]]:
    """``(normalised name, distribution)`` of every distribution on ``sys.path``, in the order
    ``importlib.metadata.distributions()`` gives them; the first of a name is the one Python
    uses. Directory entries are listed here; anything else is asked of ``importlib.metadata``."""
    if _foreign_finders():  # someone provides distributions their own way: ask the standard API
        yield from _through_importlib_metadata(None)
        return
    for entry in sys.path:
        root = entry or "."
        try:
            children = os.listdir(root)
        except NotADirectoryError:  # a zip file
            yield from _through_importlib_metadata(entry)
            continue
        except OSError:
            continue
        if os.path.basename(root).lower().endswith(".egg"):
            yield from _through_importlib_metadata(entry)
            continue
        grouped: dict[str, list[str]] = {}  # listing order, one group per name
        for child in children:
            low = child.lower()
            if low.endswith((".dist-info", ".egg-info")):
                grouped.setdefault(_normalized(low.rpartition(".")[0].partition("-")[0]), []).append(child)
        for key, group in grouped.items():
            for child in group:
                yield key, InstalledDistribution(os.path.join(root, child))


def _through_importlib_metadata(entry: str | None) -> Iterator[tuple[str, Any]]:
    from importlib import metadata as importlib_metadata

    found = importlib_metadata.distributions() if entry is None else importlib_metadata.distributions(path=[entry])
    for dist in found:
        key = getattr(dist, "_normalized_name", None) or _normalized(dist.metadata["Name"] or "")
        yield key, dist


def installed_entry_points(group: str) -> list[Any]:
    """The entry points of ``group``, as ``importlib.metadata.entry_points(group=group)`` finds
    them: the first distribution of a name on the path counts, a later copy of it does not.

    Most installed distributions declare other groups or none: the file of each is only
    searched for the group's header, and parsed only when the header is there.
    """
    header = f"[{group}]"
    seen: set[str] = set()
    found: list[Any] = []
    for key, dist in _list_path():
        if key in seen:
            continue
        seen.add(key)
        text = dist.read_text("entry_points.txt")
        if text and header in text:
            if isinstance(dist, InstalledDistribution):
                found.extend(InstalledEntryPoint(name, value, group, dist)
                             for name, value in _section(text, group))
            else:
                found.extend(dist.entry_points.select(group=group))
    return found


def _section(text: str, group: str) -> Iterator[tuple[str, str]]:
    """The ``name = value`` lines of section ``[group]`` of an INI-style entry-points file."""
    inside = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            inside = line[1:-1].strip() == group
            continue
        if inside:
            name, separator, value = line.partition("=")
            if separator:
                yield name.strip(), value.strip()


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
            if at_least.startswith(">=") and "," not in at_least:
                have, want = release_numbers(installed), release_numbers(at_least[2:].strip())
                if have is not None and want is not None:  # the usual form: numbers on both sides
                    if _padded(have, len(want)) < _padded(want, len(have)):
                        missing.append(f"{simple.group(1)}{at_least.replace(' ', '')} (found {installed})")
                    continue
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


def release_numbers(version: str) -> tuple[int, ...] | None:
    """The numbers of a plain release (``"2.13.0"``, ``"2.13.0+cpu"``: a local label does not
    count against ``>=``), or ``None`` for any other form, which packaging compares."""
    parts = version.partition("+")[0].split(".")
    return tuple(int(part) for part in parts) if all(part.isdigit() for part in parts) else None


def _padded(numbers: tuple[int, ...], length: int) -> tuple[int, ...]:
    return numbers + (0,) * (length - len(numbers))


_versions: dict[str, Any] = {}  # normalised name -> version or None; "" -> the sys.path it was read with
_first: dict[str, list[Any]] = {}  # normalised name -> its distributions, in path order (same sys.path)
_listing: list[tuple[str, Any]] = []  # (normalised name, distribution) on that sys.path, in path order


def _list_path() -> list[tuple[str, Any]]:
    """:func:`installed_distributions`, listed once for this ``sys.path`` until
    :func:`forget_versions`: entry points and versions are read from the same listing."""
    if _versions.get("", ()) != sys.path:  # a directory added to the path may hold more distributions
        forget_versions()
        _versions[""] = list(sys.path)
        _listing.extend(installed_distributions())
        for found_key, dist in _listing:
            _first.setdefault(found_key, []).append(dist)
    return _listing


def installed_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (``None`` when absent), asked once per
    process: every run checks the same few dozen requirements, and each look-up reads metadata.

    The path is listed once for all the names asked; the first distribution of the name whose
    headers give a version is the one (``importlib.metadata.distribution(name)``'s choice).
    """
    key = _normalized(name)
    _list_path()
    if key not in _versions:
        _versions[key] = next(filter(None, (distribution_name_and_version(dist)[1] for dist in _first.get(key, ()))),
                              None)
    return _versions[key]


def distribution_name_and_version(dist: Any) -> tuple[str | None, str | None]:
    """(Name, Version) of an installed distribution, read from its metadata's headers.

    ``dist.name`` and ``dist.version`` parse the whole metadata file, long description
    included, with the email package: reading the two header lines costs a fraction of that.
    """
    if isinstance(dist, InstalledDistribution):
        name, version = dist.headers()
    else:
        read_text = getattr(dist, "read_text", None)
        try:
            text = (read_text("METADATA") or read_text("PKG-INFO")) if read_text is not None else None
        except Exception:  # a distribution of an odd kind: ask it the usual way below
            text = None
        name, version = _name_and_version((text or "").splitlines())
    if name is None:
        name = getattr(dist, "name", None) or getattr(dist, "metadata", {}).get("Name", "")
    if version is None:
        version = getattr(dist, "version", None)
    return name, version


def _name_and_version(lines: Iterable[str]) -> tuple[str | None, str | None]:
    """The Name and Version fields of metadata's header lines (up to the first blank line)."""
    name = version = None
    for line in lines:
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key == "Name" and name is None:
            name = value.strip()
        elif key == "Version" and version is None:
            version = value.strip()
    return name, version


def forget_versions() -> None:
    """List the path and ask the installed versions again from now on (something was installed)."""
    _versions.clear()
    _first.clear()
    _listing.clear()
