"""The launcher's view of a hung collective: every rank's report side by side, and who never arrived.

Each worker writes what it is doing when a collective fails or outlives the timeout
(:mod:`drivetrain.runtime.collective_watch`). Read together, the reports say which collective
the ranks waited in (the one a rank that failed or timed out was in), which ranks were in it,
and which never arrived: a rank in no collective, in another one (another operation, or the
same one called a different number of times), or one that wrote nothing (stopped, dead, or
stuck in C code that holds the interpreter). Ranks that all arrived but passed different
shapes or dtypes are named too.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..runtime.collective_watch import REPORT_SUFFIX, one_line, rank_records

#: Innermost frames of each rank's Python stack shown in the launcher's report.
SHOWN_FRAMES = 6


def recorded_collectives(errors: str) -> dict[int, dict]:
    """Every rank's report in ``errors``: rank -> report."""
    return dict(rank_records(errors, REPORT_SUFFIX))


def _key(report: Mapping[str, Any]) -> tuple | None:
    """What makes two ranks' collectives the same call: the operation (the outer one drivetrain
    issued, if any, and the backend's), its group and how many collectives of that group came before."""
    collective = report.get("collective")
    if not collective:
        return None
    group = tuple(collective["group"]) if collective.get("group") else None
    return (collective.get("via") or collective["op"], collective["op"], group, collective.get("sequence"))


def _awaited(reports: Mapping[int, Mapping[str, Any]]) -> tuple | None:
    """The collective the job hung in: that of the first rank whose collective failed or outlived
    the timeout (rather than one that only answered another rank's report)."""
    own = sorted((report.get("time", 0.0), rank) for rank, report in reports.items()
                 if report.get("trigger") in ("error", "watchdog") and _key(report) is not None)
    if own:
        return _key(reports[own[0][1]])
    keyed = [_key(report) for report in reports.values() if _key(report) is not None]
    return max(keyed, key=keyed.count) if keyed else None


def _describe(key: tuple) -> str:
    outer, op, group, sequence = key
    name = op if outer == op else f"{op} (in {outer})"
    where = f" of group {list(group)}" if group else ""
    return f"{name}, collective #{sequence}{where}"


def never_arrived(reports: Mapping[int, Mapping[str, Any]], ranks: Iterable[int]) -> tuple[tuple | None, list[int]]:
    """The awaited collective and the ranks (of its group, among ``ranks``) that are not in it."""
    key = _awaited(reports)
    if key is None:
        return None, []
    expected = sorted(set(key[2]) if key[2] else set(ranks) | set(reports))
    return key, [rank for rank in expected if rank not in reports or _key(reports[rank]) != key]


def hang_lines(reports: Mapping[int, Mapping[str, Any]], ranks: Iterable[int]) -> list[str]:
    """The report's lines: who never arrived, then each rank's collective and the innermost
    frames of its stack, side by side. Empty without reports."""
    if not reports:
        return []
    ranks = sorted(set(ranks) | set(reports))
    key, missing = never_arrived(reports, ranks)
    lines = []
    if key is not None:
        if missing:
            for rank in missing:
                where = (f"it was in {one_line(reports[rank])}" if rank in reports else
                         "it wrote no report (stopped, dead, or stuck in code that holds the interpreter)")
                lines.append(f"rank {rank} never arrived at {_describe(key)}: {where}")
        else:
            layouts = {rank: tuple(reports[rank]["collective"].get("tensors") or ()) for rank in reports}
            if len(set(layouts.values())) > 1:
                shown = "; ".join(f"rank {rank}: {' '.join(layout) or '-'}" for rank, layout in layouts.items())
                lines.append(f"every rank arrived at {_describe(key)} but with different shapes or dtypes: {shown}")
    lines.append("what each rank was doing (op, tensors, group, line of the script):")
    for rank in ranks:
        report = reports.get(rank)
        if report is None:
            lines.append(f"  rank {rank}: no report")
            continue
        collective = report.get("collective") or {}
        waited = f", waiting {collective['waited']:.1f} s" if collective.get("waited") is not None else ""
        error = f" [{report['error']}]" if report.get("error") else ""
        lines.append(f"  rank {rank}: {one_line(report)}{waited}{error}")
        for frame in (report.get("stack") or [])[-SHOWN_FRAMES:]:
            lines.extend(f"      {text}" for text in frame.splitlines() if text.strip())
    return lines


def culprit_reason(reports: Mapping[int, Mapping[str, Any]], ranks: Iterable[int]) -> tuple[int, str] | None:
    """The first rank that never arrived and why, for the launcher's first line; ``None`` if none."""
    key, missing = never_arrived(reports, ranks)
    if key is None or not missing:
        return None
    return missing[0], f"never arrived at {_describe(key)}, where the others waited (below)"
