"""A hung collective is named: which collective each rank is in, and the rank that never arrived."""

from __future__ import annotations

import json
import re
import sys
import threading
import time

import pytest
import torch

from drivetrain.runtime import collective_watch
from drivetrain.services.hang_report import hang_lines, never_arrived, recorded_collectives
from drivetrain.services.launchers import failure_summary, recorded_failures
from launching import SCRIPTS, launch


def _line_of(path, marker: str) -> int:
    return next(number for number, text in enumerate(path.read_text().splitlines(), 1) if marker in text)


def test_a_rank_that_never_joins_an_all_reduce_is_named_with_the_op_shape_and_line():
    script = SCRIPTS / "hang_in_all_reduce.py"
    started = time.monotonic()
    result = launch(script, timeout=120)
    took = time.monotonic() - started
    assert result.returncode != 0, result.stdout
    report = result.stderr[result.stderr.index("drivetrain launch: "):]
    assert "all_reduce returned" not in result.stdout
    wait_line, hang_line = _line_of(script, "# WAIT"), _line_of(script, "# HANG")
    # the culprit first, then the collective the others waited in and where each rank was
    assert re.search(r"rank 1 failed first\n  rank 1 .*never arrived at all_reduce, collective #2", report), report
    assert re.search(rf"rank 1 never arrived at all_reduce, collective #2: it was in no collective at "
                     rf"\S*hang_in_all_reduce.py:{hang_line} in <module>", report), report
    assert re.search(rf"rank 0: all_reduce \[2, 3\] float32 at \S*hang_in_all_reduce.py:{wait_line} in <module>, "
                     r"waiting \d+\.\d s \[RuntimeError: Timed out", report), report
    # each rank's Python stack ends where it is: rank 1 asleep, rank 0 in the all_reduce
    rank1 = report[report.index("  rank 1: no collective"):]
    assert "time.sleep(120)" in rank1
    assert "dist.all_reduce(values)" in report[report.index("  rank 0: all_reduce"):report.index("  rank 1: no")]
    assert took < 90, f"the hang was reported after {took:.0f} s; the collective timeout is 3 s"


# ----------------------------------------------------------------- in one process


def _report(rank, op=None, via=None, sequence=1, tensors=("[4] float32",), group=None, trigger="error",
            site="train.py:12 in main", at=100.0):
    collective = None if op is None else {"op": op, "via": via, "sequence": sequence, "tensors": list(tensors),
                                          "group": group, "waited": 30.0}
    return {"rank": rank, "time": at, "trigger": trigger, "error": "RuntimeError: Timed out" if trigger == "error"
            else None, "collective": collective, "call_site": site, "stack": [f'  File "train.py", line 1\n    x()'],
            "pid": 1}


def test_the_rank_in_no_collective_another_one_or_with_no_report_never_arrived():
    reports = {0: _report(0, "all_reduce", "reduce", sequence=7),
               1: _report(1, trigger="peer", site="train.py:9 in main"),
               2: _report(2, "broadcast", sequence=7, trigger="peer", site="train.py:20 in main"),
               3: _report(3, "all_reduce", "reduce", sequence=7, trigger="watchdog", at=101.0)}
    key, missing = never_arrived(reports, range(5))
    assert key == ("reduce", "all_reduce", None, 7)
    assert missing == [1, 2, 4]
    text = "\n".join(hang_lines(reports, range(5)))
    assert "rank 1 never arrived at all_reduce (in reduce), collective #7: it was in no collective at train.py:9" in text
    assert "rank 2 never arrived at all_reduce (in reduce), collective #7: it was in broadcast [4] float32 at " \
           "train.py:20" in text
    assert "rank 4 never arrived" in text and "it wrote no report" in text
    assert "  rank 3: all_reduce (in reduce) [4] float32 at train.py:12 in main, waiting 30.0 s" in text
    assert "rank 0 never" not in text and "rank 3 never" not in text


def test_the_same_op_called_a_different_number_of_times_is_another_collective():
    reports = {0: _report(0, "all_reduce", sequence=5), 1: _report(1, "all_reduce", sequence=4, trigger="peer")}
    assert never_arrived(reports, [0, 1])[1] == [1]


def test_a_collective_of_a_group_waits_only_for_the_group():
    reports = {0: _report(0, "all_gather", sequence=2, group=[0, 2]), 1: _report(1, trigger="peer")}
    assert never_arrived(reports, range(4))[1] == [2]


def test_ranks_that_all_arrived_with_other_shapes_are_named_with_them():
    reports = {0: _report(0, "all_gather_into_tensor", "gather", tensors=("[8] float32", "[4] float32")),
               1: _report(1, "all_gather_into_tensor", "gather", tensors=("[4] float32", "[2, 2] float32"))}
    lines = hang_lines(reports, [0, 1])
    assert lines[0] == ("every rank arrived at all_gather_into_tensor (in gather), collective #1 but with different "
                        "shapes or dtypes: rank 0: [8] float32 [4] float32; rank 1: [4] float32 [2, 2] float32")


def test_the_launchers_summary_names_the_rank_that_never_arrived_first(tmp_path):
    class Failure:
        failures: dict = {}

    reports = {0: _report(0, "all_reduce", sequence=3), 1: _report(1, trigger="peer", site="train.py:8 in main")}
    for rank, report in reports.items():
        (tmp_path / f"{rank}{collective_watch.REPORT_SUFFIX}").write_text(json.dumps(report))
    (tmp_path / f"5{collective_watch.REPORT_SUFFIX}.tmp").write_text("{half")  # a report being written: not read
    assert recorded_collectives(str(tmp_path)) == {0: reports[0], 1: reports[1]}
    assert recorded_failures(str(tmp_path)) == {}  # a report is no error record of its rank
    summary = failure_summary(Failure(), recorded={0: (100.0, "RuntimeError: Timed out")},
                              exits={0: (100.5, 1), 1: (100.6, -15)}, collectives=recorded_collectives(str(tmp_path)))
    lines = summary.splitlines()
    assert lines[0] == "drivetrain launch: 2 process(es) failed; rank 1 failed first"
    assert lines[1].startswith("  rank 1 was killed by signal 15 (SIGTERM): never arrived at all_reduce, collective #3")
    assert any(line.startswith("rank 1 never arrived at all_reduce, collective #3: it was in no collective at "
                               "train.py:8") for line in lines)


def test_a_collective_in_progress_is_recorded_with_its_tensors_and_the_scripts_line(monkeypatch):
    seen = {}

    def all_reduce(tensor, group=None):
        seen["report"] = collective_watch.build_report("watchdog", 0)
        return tensor

    outer = collective_watch.watched("reduce", lambda tensor: watched_inner(tensor))
    watched_inner = collective_watch.watched("all_reduce", all_reduce)
    before = collective_watch.current()
    outer(torch.zeros(3, 2, dtype=torch.int64))
    line = sys._getframe().f_lineno - 1
    report = seen["report"]
    assert before is None and collective_watch.current() is None  # nothing left behind
    assert report["collective"]["op"] == "all_reduce" and report["collective"]["via"] == "reduce"
    assert report["collective"]["tensors"] == ["[3, 2] int64"]
    assert report["call_site"] == f"{__file__}:{line} in {sys._getframe().f_code.co_name}"
    # the stack goes on into the collective, to the innermost frame
    assert "outer(torch.zeros" in report["stack"][-3] and "build_report" in report["stack"][-1]
    assert collective_watch.one_line(report).startswith("all_reduce (in reduce) [3, 2] int64 at ")


def test_the_watchdog_reports_a_collective_that_outlives_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv(collective_watch.ERRORS_DIR_VARIABLE, str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setattr(collective_watch, "_reported", [])
    release = threading.Event()
    stuck = collective_watch.watched("barrier", lambda: release.wait(10))
    watchdog = collective_watch._Watchdog(timeout=0.2, world_size=2).start()
    try:
        worker = threading.Thread(target=stuck)
        worker.start()
        deadline = time.monotonic() + 10
        while not (tmp_path / "3.collective.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        release.set()
        worker.join()
    finally:
        watchdog.stop()
    report = json.loads((tmp_path / "3.collective.json").read_text())
    assert report["trigger"] == "watchdog" and report["rank"] == 3
    assert report["collective"]["op"] == "barrier" and report["collective"]["waited"] >= 1.0
    assert any("release.wait(10)" in frame for frame in report["stack"])


def test_an_error_that_is_the_callers_writes_no_report(monkeypatch):
    monkeypatch.setattr(collective_watch, "_reported", [])

    def refuse(value):
        raise TypeError("not a tensor")

    with pytest.raises(TypeError):
        collective_watch.watched("gather", refuse)("a string")
    assert collective_watch._reported == [] and collective_watch.current() is None


def test_a_timeout_raised_outside_a_recorded_call_is_reported_where_it_was_raised(tmp_path, monkeypatch):
    # torch's collectives from C++ (DistributedDataParallel's gradient all-reduce) raise in backward()
    monkeypatch.setenv(collective_watch.ERRORS_DIR_VARIABLE, str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(collective_watch, "_reported", [])
    monkeypatch.setattr(collective_watch, "_watch", [collective_watch._Watchdog(timeout=60, world_size=1)])

    def backward():
        raise RuntimeError("[../gloo/transport/tcp/pair.cc:534] Timed out waiting 3000ms for recv")

    try:
        backward()
    except RuntimeError as error:
        collective_watch.report_uncaught(error)
    collective_watch.report_uncaught(RuntimeError("Timed out again"))  # one report in a process's life
    report = json.loads((tmp_path / "1.collective.json").read_text())
    assert report["error"] == "RuntimeError: Timed out waiting 3000ms for recv" and report["collective"] is None
    assert report["call_site"] == f"{__file__}:{backward.__code__.co_firstlineno + 1} in backward"
    assert "raise RuntimeError" in report["stack"][-1]


def test_an_error_that_is_no_timeout_is_left_to_the_launchers_usual_report(monkeypatch):
    monkeypatch.setattr(collective_watch, "_reported", [])
    monkeypatch.setattr(collective_watch, "_watch", [collective_watch._Watchdog(timeout=60, world_size=1)])
    collective_watch.report_uncaught(ValueError("bad value"))
    assert collective_watch._reported == []
