"""Fault tolerance: a rank that dies, a job restarted by the launcher, resumed exactly."""

from __future__ import annotations

import os
import re
import sys
import time
from datetime import timedelta

import pytest
import torch
from launching import assert_ok, launch

SCRIPT = "check_fault_tolerance.py"


def test_each_attempt_has_its_own_store_keys(monkeypatch):
    """A restarted group must not read what the failed attempt's group left in the agent's store."""
    import torch.distributed as dist
    from drivetrain_torch_distributed.process_group import attempt_store

    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(server.port))
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    attempt_store(timedelta(seconds=5)).set("rank_1", "address of a process that is gone")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    second = attempt_store(timedelta(seconds=5))
    assert not second.check(["rank_1"])
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE")
    assert attempt_store(timedelta(seconds=5)) is None  # a store of its own: env:// as usual


def test_attempt_errors_dir_is_per_attempt(tmp_path):
    from drivetrain.services.restarts import attempt_errors_dir

    assert attempt_errors_dir(None) is None
    first = attempt_errors_dir(str(tmp_path), {"TORCHELASTIC_RESTART_COUNT": "0"})
    second = attempt_errors_dir(str(tmp_path), {"TORCHELASTIC_RESTART_COUNT": "1"})
    assert first != second and (tmp_path / "attempt1").is_dir()


def test_the_report_says_how_each_attempt_failed(tmp_path):
    """Each attempt is reported from its own records: attempt 2 never borrows attempt 1's exit code."""
    import json

    from drivetrain.runtime.process_exits import ExitWatcher
    from drivetrain.services.restarts import AttemptWatchers

    attempts = AttemptWatchers(str(tmp_path))
    for attempt, exits in ((0, {0: (2.0, -15), 1: (1.0, 17)}), (1, {0: (1.0, 1), 1: (2.0, -15)})):
        folder = tmp_path / f"attempt{attempt}"
        folder.mkdir()
        attempts.watchers[attempt] = ExitWatcher(str(folder))
        attempts.watchers[attempt].exits = exits
    (tmp_path / "attempt1" / "0.json").write_text(json.dumps({"time": 1.0, "error": "ValueError: bad batch"}))
    report = attempts.report()
    assert report.splitlines()[0] == ("drivetrain launch: attempt 1: rank 1 exited with code 17; "
                                      "attempt 2: rank 0 exited with code 1: ValueError: bad batch"), report
    first, second = report.split("\n", 1)[1].split("attempt 2: 2 process(es)")
    assert "bad batch" not in first and "code 17" not in second


def test_a_recovery_within_one_restart_count_is_not_called_the_first_attempt(tmp_path, capsys):
    """A machine that rejoins makes torch's agent start the workers again under the same restart
    count: the failure and the success share a folder, and the line must not say attempt 1
    succeeded."""
    from drivetrain.runtime.process_exits import ExitWatcher
    from drivetrain.services.restarts import AttemptWatchers
    from drivetrain_torchrun.launcher import report_recovery

    for recorded, expected in (({0: {0: (1.0, 1)}}, "the workers started again when a machine rejoined succeeded"),
                               ({0: {0: (1.0, 1)}, 1: {0: (2.0, 0)}}, "attempt 2 succeeded")):
        attempts = AttemptWatchers(str(tmp_path))
        for attempt, exits in recorded.items():
            (tmp_path / f"attempt{attempt}").mkdir(exist_ok=True)
            attempts.watchers[attempt] = ExitWatcher(str(tmp_path / f"attempt{attempt}"))
            attempts.watchers[attempt].exits = exits
        report_recovery(attempts)
        assert capsys.readouterr().err.rstrip().endswith(f"; {expected}")


def test_a_rank_the_agent_collected_first_is_reported_with_its_code(tmp_path):
    """On a loaded machine torch's agent can collect a dead worker before the launcher's watcher
    sees it end: the code the agent logs for it still makes the attempt's report."""
    import logging
    import subprocess

    from drivetrain.services.restarts import AttemptWatchers
    from drivetrain_torchrun.launcher import _AgentExits

    worker = subprocess.Popen([sys.executable, "-c", "import os; os._exit(17)"])
    worker.wait()  # collected, as the agent does, before any watcher looks
    (tmp_path / "attempt0").mkdir()
    (tmp_path / "attempt0" / "1.pid").write_text(str(worker.pid))
    with AttemptWatchers(str(tmp_path)) as attempts:
        deadline = time.monotonic() + 30
        while 1 not in getattr(attempts.watchers.get(0), "exits", {}) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert attempts.watchers[0].exits[1][1] is None and attempts.failed_attempts() == []
        record = logging.LogRecord("torch.distributed.elastic.multiprocessing.api", logging.ERROR, __file__, 1,
                                   "failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s",
                                   (17, 1, worker.pid, sys.executable), None)
        _AgentExits(attempts).emit(record)
        assert attempts.failed_attempts() == [0]
        assert "rank 1 exited with code 17" in attempts.summary(0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process states are read from /proc")
def test_a_stopped_rank_is_named_when_the_agent_collects_the_failed_one_first(tmp_path):
    """On a loaded machine the launcher's poll collects a failed worker before the watcher sees
    it end: the stopped rank must still be noted and continued before the agent ends everyone,
    or it waits out the grace period, is killed and reported as merely slow."""
    import signal
    import subprocess

    from drivetrain.runtime.process_exits import ExitWatcher, process_state

    failed = subprocess.Popen(["false"])
    stopped = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while process_state(stopped.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        (tmp_path / "0.pid").write_text(str(failed.pid))
        (tmp_path / "1.pid").write_text(str(stopped.pid))
        watcher = ExitWatcher(str(tmp_path))  # its thread never runs: the agent is always first here
        watcher.note_reaped(failed.pid, failed.wait())
        assert list(watcher.stopped) == [1]
        assert stopped.wait(timeout=10) == -signal.SIGTERM
    finally:
        stopped.kill()
        stopped.wait()


def test_a_warning_is_not_kept_as_a_ranks_last_error_line(tmp_path, monkeypatch):
    """A rank that dies silently right after a library warned (a Python warning, a log record
    below ERROR) is reported without that warning; a logged error is kept."""
    import logging
    import warnings

    from drivetrain.runtime.process_exits import last_stderr_line, note_worker_start

    monkeypatch.setattr(sys, "stderr", sys.stderr)
    # as Python's default, which pytest's own capture would replace
    monkeypatch.setattr(warnings, "showwarning", lambda message, category, filename, lineno, file=None, line=None:
                        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line)))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(logging.Logger, "callHandlers", logging.Logger.callHandlers)
    note_worker_start(str(tmp_path))
    print("ValueError: bad batch", file=sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("all_gather_into_tensor is deprecated", FutureWarning)
    assert last_stderr_line(str(tmp_path), 1) == "ValueError: bad batch"
    print("RuntimeError: after the warning", file=sys.stderr)
    assert last_stderr_line(str(tmp_path), 1) == "RuntimeError: after the warning"
    logger = logging.getLogger("a.library")
    handler = logging.StreamHandler(sys.stderr)  # made now, as a library makes its own: it writes to the keeper
    logger.addHandler(handler)
    monkeypatch.setattr(logger, "propagate", False)
    try:
        logger.warning("checkpoint_3 was saved inside a gradient-accumulation window")
        assert last_stderr_line(str(tmp_path), 1) == "RuntimeError: after the warning"
        logger.error("OSError: disk full")
        assert last_stderr_line(str(tmp_path), 1) == "OSError: disk full"
    finally:
        logger.removeHandler(handler)


def _params(path):
    return torch.load(path / "final.pt")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """``uninterrupted(strategy, env)``: the final parameters of the run that never failed,
    launched once per strategy for every test of the module that compares with it."""
    done: dict[str, dict] = {}

    def parameters(strategy: str, env: dict | None = None) -> dict:
        if strategy not in done:
            out = tmp_path_factory.mktemp(f"straight-{strategy}")
            assert_ok(launch(SCRIPT, str(out), strategy, env=env))
            done[strategy] = _params(out)
        return done[strategy]

    return parameters


def _assert_same(straight, other, what):
    assert straight.keys() == other.keys()
    for key in straight:
        assert torch.equal(straight[key], other[key]), f"{what}: {key} differs from the uninterrupted run"


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_stopped_then_a_killed_rank_are_named_and_the_job_ends_bitwise_equal(tmp_path, uninterrupted):
    """Under FSDP2, --timeout 10 and --max-restarts 2 (checkpoints every 3 steps, 16 steps):
    rank 1 stops itself (SIGSTOP) after step 7; after the timeout the report names it and every
    worker is restarted from checkpoint 6. In that attempt rank 1 dies after step 13; they
    restart from checkpoint 12 and end with the parameters of the run that never failed. (The
    checkpoints resumed from end a gradient-accumulation window of 2 steps: one saved inside a
    window is resumed without its gradients, and warns. One launch for both faults.)"""
    restarted = tmp_path / "restarted"
    result = launch(SCRIPT, str(restarted), "fsdp2", "--hang-after", "7", "--crash-after", "13",
                    launch_args=("--timeout", "10", "--max-restarts", "2"))
    assert_ok(result)
    assert re.search(r"attempt 1: rank 1 [^;]*: it was stopped \(SIGSTOP\)[^;]*; "
                     r"attempt 2: rank 1 exited with code 17; attempt 3 succeeded", result.stderr), result.stderr
    _assert_same(uninterrupted("fsdp2"), _params(restarted), "fsdp2")


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_killed_deepspeed_rank_is_restarted_and_ends_bitwise_equal(tmp_path, deepspeed_ops, uninterrupted):
    """Under DeepSpeed (ZeRO-2), rank 1 dies after step 8: the launcher restarts every worker,
    they resume from checkpoint 6 and end with the parameters of the run that never failed.
    Rank 1's last stderr line is a library's warning: the report must not give it as the
    reason rank 1 ended. (DDP's restart and resume are the restarted machine's below, and
    test_resume_multiprocess's.)"""
    restarted = tmp_path / "restarted"
    result = launch(SCRIPT, str(restarted), "deepspeed", "--crash-after", "8", launch_args=("--max-restarts", "1"),
                    env=deepspeed_ops)
    assert_ok(result)
    assert "attempt 1: rank 1 exited with code 17; attempt 2 succeeded" in result.stderr, result.stderr
    _assert_same(uninterrupted("deepspeed", deepspeed_ops), _params(restarted), "deepspeed")


def test_resume_takes_the_newest_checkpoint_complete_on_every_process():
    from drivetrain.services.checkpointing.run_state import newest_common

    # rank 1 died while writing checkpoint 9: 6 is the newest both finished
    assert newest_common([[3, 6, 9], [3, 6]]) == [3, 6]
    assert newest_common([[3], [6]]) == []


def test_total_limit_never_deletes_the_only_complete_checkpoint(tmp_path):
    from drivetrain.services.checkpointing import layout

    complete, partial = tmp_path / "checkpoint_1", tmp_path / "checkpoint_2"
    complete.mkdir(), partial.mkdir()
    (complete / layout.MANIFEST).write_text("{}")
    layout.rotate(tmp_path, 1, newest=partial)
    assert complete.exists()
    assert [number for number, _path in layout.automatic_checkpoints(tmp_path)] == [1]


def _seen_per_epoch(directory):
    """Sample ids trained on in each epoch, over every process of every layout that ran there."""
    import json

    epochs: dict[int, list[int]] = {}
    for path in directory.glob("seen-*.json"):
        for epoch, ids in enumerate(json.loads(path.read_text())["epochs"]):
            epochs.setdefault(epoch, []).extend(ids)
    return epochs


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_two_process_job_resumes_on_one_and_on_four(tmp_path):
    """Stopped mid-epoch on 2 processes (after the checkpoint of step 6), resumed on 1 and on 4:
    every sample of both epochs is trained on exactly once across the two layouts. Under FSDP2,
    whose sharded state is the one that reshards; the loader's position reshards the same way
    under any strategy (a DDP checkpoint of two processes loads into one in
    test_resume_multiprocess, in-process)."""
    import shutil

    first = tmp_path / "first"
    assert_ok(launch(SCRIPT, str(first), "fsdp2", "--stop-after", "6"))
    for processes in (1, 4):
        resumed = shutil.copytree(first, tmp_path / f"on{processes}")
        assert_ok(launch(SCRIPT, str(resumed), "fsdp2", num_processes=processes))
        epochs = _seen_per_epoch(resumed)
        assert sorted(epochs) == [0, 1]
        for epoch, ids in epochs.items():
            assert sorted(ids) == list(range(32)), f"2 -> {processes}, epoch {epoch}: {sorted(ids)}"
        assert (resumed / "final.pt").exists()


class _Machines:
    """``drivetrain launch`` twice on this host as machines 0 and 1 of one job (c10d rendezvous)."""

    # A killed launcher stays a member of the rendezvous until its heartbeats are missed
    # keep_alive_max_attempt times: 15 s with torch's defaults (every 5 s, 3 times), most of
    # what a restarted machine waited for. Every second, 5 times: the same check, sooner.
    RENDEZVOUS_CONF = "keep_alive_interval=1,keep_alive_max_attempt=5"

    def __init__(self, out, *launch_args: str) -> None:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.out, self.launch_args, self.procs = out, launch_args, {}

    def start(self, rank: int):
        import subprocess

        from conftest import clean_environ
        from launching import SCRIPTS

        self.procs[rank] = subprocess.Popen(
            [sys.executable, "-m", "drivetrain", "launch", "--cpu", "--num-processes", "2", "--num-machines", "2",
             "--machine-rank", str(rank), "--main-process-ip", "127.0.0.1", "--main-process-port", str(self.port),
             "--rdzv-backend", "c10d", "--rdzv-timeout", "60", "--rdzv-conf", self.RENDEZVOUS_CONF, *self.launch_args,
             str(SCRIPTS / SCRIPT),
             str(self.out), "ddp", "--step-seconds", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=clean_environ())
        return self.procs[rank]

    def start_both_and_wait_for_training(self) -> None:
        import socket

        def listening():
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", self.port)) == 0

        # Machine 0 hosts the rendezvous at the address every machine is given, as on a cluster:
        # on one host either launcher could, so machine 1 starts once machine 0 listens.
        self.start(0)
        deadline = time.monotonic() + 60
        while not listening() and time.monotonic() < deadline and self.procs[0].poll() is None:
            time.sleep(0.2)
        self.start(1)
        from drivetrain.services.checkpointing import layout

        def committed() -> bool:  # a checkpoint that a restart resumes from, not one being written
            return bool(layout.automatic_checkpoints(self.out / "checkpoints"))

        deadline = time.monotonic() + 120
        while not committed() and time.monotonic() < deadline:
            for proc in self.procs.values():
                assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        assert committed(), "the two machines never trained together up to a checkpoint"

    def kill(self, rank: int) -> None:
        import signal

        self.procs[rank].send_signal(signal.SIGKILL)
        self.procs[rank].communicate()

    def __enter__(self) -> "_Machines":
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_when_one_of_two_machines_is_lost_the_other_ends_naming_it(tmp_path):
    """Two launchers as two machines (c10d rendezvous on this host); machine 1's launcher is
    killed once training runs: machine 0 ends soon after, with one line naming machine 1."""
    with _Machines(tmp_path / "job") as machines:
        machines.start_both_and_wait_for_training()
        machines.kill(1)
        _out, err = machines.procs[0].communicate(timeout=60)  # bounded: it must not wait for the lost machine
    assert machines.procs[0].returncode != 0
    assert "machine 1 was lost" in err, err


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_restarted_machine_rejoins_and_the_job_ends_bitwise_equal(tmp_path, uninterrupted):
    """Under --max-restarts 1, machine 1's launcher is killed after the first checkpoint and
    started again: machine 0 restarts its workers, the two meet in a new rendezvous round,
    resume from the newest complete checkpoint and end with the uninterrupted run's parameters."""
    with _Machines(tmp_path / "job", "--max-restarts", "1") as machines:
        machines.start_both_and_wait_for_training()
        machines.kill(1)
        machines.start(1)
        results = {rank: proc.communicate(timeout=180) for rank, proc in machines.procs.items()}
    for rank, proc in machines.procs.items():
        assert proc.returncode == 0, f"machine {rank}: {results[rank][1][-3000:]}"
    # whether machine 0's worker fails before machine 1 rejoins decides if torch's agent counts
    # the restart: either way the line says the workers succeeded after the failure
    assert re.search(r"; (attempt 2|the workers started again when a machine rejoined) succeeded", results[0][1]), \
        results[0][1]
    # two processes, as the two machines' one each
    _assert_same(uninterrupted("ddp"), _params(tmp_path / "job"), "a restarted machine")
