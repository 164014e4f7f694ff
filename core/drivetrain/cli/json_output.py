"""Commands run with ``--json`` write nothing but their JSON on stdout.

A plugin may print while it is imported or while one of its hooks runs; under ``--json``
that text would make the output unreadable for the program reading it. While such a
command runs, everything printed goes to stderr, and :func:`emit` alone writes to the
stdout the command started with.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator, Sequence

_stdout: Any = None


@contextlib.contextmanager
def json_only_stdout(argv: Sequence[str]) -> Iterator[None]:
    """Send what is printed to stderr while the command ``argv`` runs, when it asks for JSON."""
    global _stdout
    if "--json" not in argv or _stdout is not None:
        yield
        return
    _stdout = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _stdout = None


def emit(data: Any, **dumps_options: Any) -> None:
    """Write ``data`` as JSON to the command's real stdout."""
    stream = _stdout if _stdout is not None else sys.stdout
    import json  # only for --json: every command imports this module

    stream.write(json.dumps(data, indent=2, **dumps_options) + "\n")
    stream.flush()
