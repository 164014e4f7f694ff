"""The one-machine launcher's own logic, in-process: the environment and the held port.
Its jobs run for real in test_launch.py and test_fault_tolerance.py."""

from __future__ import annotations

import argparse
import socket

import pytest

from drivetrain_torchrun.local import reserved_port, worker_environment


def _args(**changes) -> argparse.Namespace:
    values = dict(num_processes=3, max_restarts=2, main_process_ip=None, main_process_port=None, role=None)
    return argparse.Namespace(**{**values, **changes})


def test_each_worker_gets_the_agents_variables_over_the_launchers_own(monkeypatch):
    monkeypatch.setenv("KEPT", "yes")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = worker_environment(_args(), rank=2, attempt=1, port=4321)
    assert env["KEPT"] == "yes"
    assert (env["RANK"], env["LOCAL_RANK"], env["ROLE_RANK"], env["GROUP_RANK"]) == ("2", "2", "2", "0")
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["ROLE_WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == (
        "3", "3", "3", "1")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "4321")
    assert (env["TORCHELASTIC_RESTART_COUNT"], env["TORCHELASTIC_MAX_RESTARTS"]) == ("1", "2")
    assert env["TORCHELASTIC_USE_AGENT_STORE"] == "False"  # rank 0 hosts the store, a new one each attempt
    assert (env["ROLE_NAME"], env["OMP_NUM_THREADS"]) == ("default", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # the user's (or --num-cpu-threads-per-process) is kept
    env = worker_environment(_args(role="trainer", main_process_ip="10.1.1.1"), rank=0, attempt=0, port=1)
    assert (env["OMP_NUM_THREADS"], env["ROLE_NAME"], env["MASTER_ADDR"]) == ("4", "trainer", "10.1.1.1")


def test_the_port_is_held_against_others_but_rank_zeros_store_can_bind_it():
    with reserved_port(_args()) as port:
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))  # another program: refused
        with socket.socket() as store:
            store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            store.bind(("", port))  # the store asks for address reuse, as torch's does
            store.listen()
    with socket.socket() as later:
        later.bind(("127.0.0.1", port))  # given back when the attempt ends
    with reserved_port(_args(main_process_port=29512)) as port:
        assert port == 29512  # the user's port is used as given


def test_workers_run_unbuffered_and_one_process_as_a_script_run_by_hand():
    import sys

    from drivetrain_torchrun.launcher import worker_command

    args = _args(no_python=False, module=False, training_script="train.py", training_script_args=["--lr", "1"])
    target = ["-m", "drivetrain.cli.child", "--script", "train.py", "--lr", "1"]
    assert worker_command(args) == [sys.executable, "-u", *target]
    assert worker_command(args, unbuffered=False) == [sys.executable, *target]
    no_python = _args(no_python=True, module=False, training_script="./run.sh", training_script_args=["x"])
    assert worker_command(no_python) == worker_command(no_python, unbuffered=False) == ["./run.sh", "x"]


def test_a_signal_the_launcher_was_started_ignoring_stays_ignored():
    """Under ``nohup`` SIGHUP is ignored, and the workers inherit that: a launcher that caught it
    would pass it on to workers that ignore it and wait for them forever."""
    import signal

    from drivetrain_torchrun.signals import Signals

    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGHUP, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with Signals() as signals:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == signals._catch
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
