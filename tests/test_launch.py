"""Real jobs: `drivetrain launch` on one machine and over torchrun, two "machines" on one host, plain torchrun,
SLURM- and MPI-style processes, failures and hangs, `drivetrain env` / `drivetrain test`,
and the Python launchers (notebook_launcher, debug_launcher)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import yaml
from conftest import clean_environ
from launching import SCRIPTS, assert_ok, launch
from local_devices import local_accelerator

pytestmark = pytest.mark.multiprocess



def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def views(*outputs: str) -> list[dict]:
    found = [json.loads(line.split(" ", 1)[1]) for out in outputs for line in out.splitlines()
             if line.startswith("CLUSTER ")]
    return sorted(found, key=lambda view: view["rank"])


def test_every_state_attribute_and_helper_across_two_processes(tmp_path):
    result = launch("check_state.py", str(tmp_path), "--expect-precision", "bf16", "--expect-debug", "1",
                    "--passthrough", "x y",
                    launch_args=("--mixed_precision", "bf16", "--debug", "--gradient-accumulation-steps", "3"),
                    env={"HF_HOME": str(tmp_path / "hf")})
    assert_ok(result)
    assert result.stdout.count("CHECK-STATE-OK") == 2
    assert result.stdout.count("PRINTED-BY-RANK-0") == 1 and "PRINTED-BY-RANK-1" not in result.stdout


def test_two_machines_on_one_host_meet_on_localhost(tmp_path):
    port = str(free_port())
    command = [sys.executable, "-m", "drivetrain", "launch", "--cpu", "--num_processes", "2", "--num_machines", "2",
               "--main_process_ip", "127.0.0.1", "--main_process_port", port, str(SCRIPTS / "check_cluster.py")]
    machines = [subprocess.Popen([*command[:-1], "--machine_rank", str(rank), command[-1]], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=clean_environ(HF_HOME=str(tmp_path)))
                for rank in (0, 1)]
    outputs = [machine.communicate(timeout=240) for machine in machines]
    assert [machine.returncode for machine in machines] == [0, 0], outputs
    seen = views(*(out for out, _err in outputs))
    assert [(v["rank"], v["world_size"], v["num_machines"], v["sum"]) for v in seen] == [(0, 2, 2, 3.0), (1, 2, 2, 3.0)]
    assert {v["cluster"] for v in seen} == {"torchelastic"}


def test_plain_torchrun_and_the_local_launcher_give_workers_the_same_job(tmp_path):
    # Plain torchrun's workers are detected as a torchelastic job; drivetrain's own launcher
    # for one machine starts its workers without torch's agent, and without torch in the
    # launcher, yet sets every variable the agent sets, with the same values where they are not
    # per-job (the port, the run id).
    plain = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                            str(SCRIPTS / "check_cluster.py")], capture_output=True, text=True, timeout=240,
                           env=clean_environ(HF_HOME=str(tmp_path), DRIVETRAIN_USE_CPU="1"))  # gloo, GPU or not
    assert_ok(plain)
    ours = launch("check_cluster.py", env={"HF_HOME": str(tmp_path)})
    assert_ok(ours)
    torchrun_seen, local_seen = views(plain.stdout), views(ours.stdout)
    for seen in (torchrun_seen, local_seen):
        assert [(v["cluster"], v["rank"], v["world_size"], v["distributed_type"], v["sum"]) for v in seen] == [
            ("torchelastic", 0, 2, "MULTI_CPU", 3.0), ("torchelastic", 1, 2, "MULTI_CPU", 3.0)]
    per_job = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE")
    for agent, local in zip(torchrun_seen, local_seen):
        assert set(agent["agent_variables"]) == set(local["agent_variables"])
        assert all(value is not None for value in local["agent_variables"].values()), local
        same = {name: value for name, value in agent["agent_variables"].items() if name not in per_job}
        assert same == {name: local["agent_variables"][name] for name in same}
    if sys.platform.startswith("linux"):
        assert [v["parent_has_torch"] for v in torchrun_seen] == [True, True]  # the check can see torch
        assert [v["parent_has_torch"] for v in local_seen] == [False, False]


@pytest.mark.parametrize("flavour", ["slurm"])  # MPI, Kubernetes: from their variables in test_selection.py
def test_processes_started_by_a_cluster_launcher_are_detected(tmp_path, flavour):
    port = str(free_port())

    def variables(rank: int) -> dict[str, str]:
        if flavour == "slurm":  # what srun exports to each task
            return {"SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank), "SLURM_NTASKS": "2", "SLURM_NNODES": "1",
                    "SLURM_NODEID": "0", "SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "localhost",
                    "MASTER_PORT": port}
        return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "2",  # what Open MPI's mpirun exports
                "OMPI_COMM_WORLD_LOCAL_RANK": str(rank), "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}

    processes = [subprocess.Popen([sys.executable, str(SCRIPTS / "check_cluster.py")], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True,
                                  env=clean_environ(HF_HOME=str(tmp_path), DRIVETRAIN_USE_CPU="1", **variables(rank)))
                 for rank in (0, 1)]
    outputs = [process.communicate(timeout=240) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    seen = views(*(out for out, _err in outputs))
    assert [(v["cluster"], v["rank"], v["local_rank"], v["world_size"], v["sum"]) for v in seen] == [
        (flavour, 0, 0, 2, 3.0), (flavour, 1, 1, 2, 3.0)]


def test_a_crashing_child_is_named_and_the_launch_fails(tmp_path):
    env = clean_environ(HF_HOME=str(tmp_path), PYTHONPATH=os.pathsep.join([str(SCRIPTS), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-m", "drivetrain", "launch", "--cpu", "--num_processes", "2",
                             "-m", "check_failure", "crash"],  # -m: run it as a module
                            capture_output=True, text=True, env=env, timeout=240)
    assert result.returncode != 0
    assert "process(es) failed; rank 1 failed first" in result.stderr
    assert "rank 1 (local rank 1" in result.stderr and "ValueError: rank 1 crashed on purpose" in result.stderr
    assert "UNREACHABLE" not in result.stdout


@pytest.mark.parametrize("how", ["InitProcessGroupKwargs", "--timeout"])
def test_a_stopped_rank_ends_the_job_after_the_timeout_and_is_named(tmp_path, how):
    # InitProcessGroupKwargs: rank 1 is stopped (SIGSTOP) while save_state syncs its files; rank 0's
    # commit and its next wait are bounded by the 4 s timeout, not the commit's own 1,800 s, and
    # rank 0 fails first with a timeout, which makes it the victim: the report names rank 1.
    # --timeout: rank 1 is stopped after the last collective and rank 0 ends its script; torch's
    # agent would wait for rank 1 forever: the launcher ends it after the timeout.
    seconds = "4"
    script_args, launch_args = (("hang", seconds, str(tmp_path / "checkpoint")), ()) \
        if how == "InitProcessGroupKwargs" else (("hang-launch-timeout",), ("--timeout", seconds))
    start = time.monotonic()
    result = launch("check_failure.py", *script_args, launch_args=launch_args, env={"HF_HOME": str(tmp_path)},
                    timeout=180)
    elapsed = time.monotonic() - start
    assert result.returncode == 1 and "UNREACHABLE" not in result.stdout
    failed, signal_name = ("2", "15 (SIGTERM)") if how == "InitProcessGroupKwargs" else ("1", "9 (SIGKILL)")
    assert f"{failed} process(es) failed; rank 1 failed first" in result.stderr, result.stderr
    assert re.search(rf"rank 1 \(local rank 1, pid \d+\) was killed by signal {re.escape(signal_name)}: it was "
                     r"stopped \(SIGSTOP\) and did not answer", result.stderr), result.stderr
    if how == "InitProcessGroupKwargs":  # rank 0 timed out: in the commit (naming rank 1) and in its wait
        assert "rank 0 (local rank 0" in result.stderr and "did not answer within the run's collective timeout " \
            "(4 s)" in result.stderr, result.stderr
        assert "rank 1 did not answer: its files were not synced within 4 s" in result.stderr, result.stderr
        assert not (tmp_path / "checkpoint").exists()
    assert elapsed < 120, f"took {elapsed:.0f}s: the timeout did not apply"


def test_config_default_to_file_to_launch_with_env_and_test(tmp_path):
    hf_home = tmp_path / "hf"
    env = clean_environ(HF_HOME=str(hf_home))
    cli = [sys.executable, "-m", "drivetrain"]
    from drivetrain.config import write_basic_config  # `drivetrain config default`: see test_config.py

    path = hf_home / "drivetrain" / "default_config.yaml"
    assert write_basic_config("bf16", path) == path
    data = yaml.safe_load(path.read_text())
    assert data["mixed_precision"] == "bf16" and data["use_cpu"] is (local_accelerator() == "cpu")
    data.update(num_processes=2, distributed_type="MULTI_CPU", use_cpu=True)
    path.write_text(yaml.safe_dump(data))
    tested = subprocess.run([*cli, "test"], capture_output=True, text=True, env=env, timeout=240)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "drivetrain self-test: 2 process(es), MULTI_CPU, platform cpu, mixed precision bf16" in tested.stdout
    assert "Test is a success!" in tested.stdout
    report = subprocess.run([*cli, "env", "--json"], capture_output=True, text=True, env=env, timeout=120)
    data = json.loads(report.stdout)
    assert data["config"]["path"] == str(path) and data["config"]["values"]["num_processes"] == 2
    assert data["detection"]["platform"] == local_accelerator() and data["torch_version"]
    cuda_status = {p["name"]: p["status"] for p in data["plugins"]}["cuda"]
    assert cuda_status == "available"  # loaded; not the run's platform, since the config asks for the CPU
    from drivetrain.cli.env_cmd import render

    text = render(data)  # what `drivetrain env` prints
    assert "- `drivetrain` version:" in text and "- PyTorch version:" in text and "\t- mixed_precision: bf16" in text
    assert "cuda: CUDA (torch build):" in text and f"- `drivetrain` config ({path}):" in text


def test_drivetrain_test_reports_a_failure(tmp_path):
    bad = tmp_path / "bad.yaml"
    # the platform named: a MULTI_GPU file alone runs CPU processes where no GPU is usable
    bad.write_text("distributed_type: MULTI_GPU\nplatform: cuda\nnum_processes: 2\n")
    result = subprocess.run([sys.executable, "-m", "drivetrain", "test", "--config-file", str(bad)],
                            capture_output=True, text=True, env=clean_environ(), timeout=120)
    if "Test is a success" in result.stdout:
        pytest.skip("two GPUs are present: the MULTI_GPU config runs here")
    assert result.returncode == 1 and "drivetrain test: FAILED" in result.stderr
    if local_accelerator() != "cuda":  # with one GPU, the two processes fail to share it instead
        assert "platform 'cuda' was requested but is not usable here" in result.stderr


# ----------------------------------------------------------------- from Python


def test_debug_and_notebook_launchers_fork_real_workers(tmp_path):
    # In a fresh interpreter, as in a notebook: this test process may hold state of its own.
    # CPU workers (gloo) even on a GPU machine: two workers cannot share one GPU
    result = subprocess.run([sys.executable, str(SCRIPTS / "check_launchers.py"), str(tmp_path), str(free_port())],
                            capture_output=True, text=True,
                            env=clean_environ(HF_HOME=str(tmp_path / "hf"), DRIVETRAIN_USE_CPU="1"), timeout=240)
    assert_ok(result)
    assert "CHECK-LAUNCHERS-OK" in result.stdout
    read = lambda name: json.loads((tmp_path / name).read_text())  # noqa: E731
    assert read("debug.0") == read("debug.1") == [2, "MULTI_CPU", 2.0, "no", True, "no"]
    assert read("notebook.0") == read("notebook.1") == [2, "MULTI_CPU", 2.0, "bf16", True, "bf16"]
    assert read("single.0") == [1, "NO", 1.0, "no", False, "no"]
    assert read("parent-env.json") == {"ACCELERATE_MIXED_PRECISION": None}  # the one-process run cleaned up
    failure = (tmp_path / "failure.txt").read_text()
    assert re.match(r"debug_launcher: [12] process\(es\) failed; rank 1 failed first", failure), failure
    # torch's agent reports the failed worker itself, or not (then its own record stands in)
    assert re.search(r"rank 1 (\(local rank 1, pid \d+\) exited with code 1|raised): "
                     r"RuntimeError: worker one fails on purpose", failure), failure


def test_launchers_refuse_a_process_that_already_has_a_group():
    code = ("import torch.distributed as dist\n"
            "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)\n"
            "from drivetrain import debug_launcher, ConfigError\n"
            "try:\n    debug_launcher(print)\nexcept ConfigError as error:\n    print('REFUSED', error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_environ(), timeout=120)
    assert "REFUSED a torch.distributed process group already exists in this process" in result.stdout, result.stderr


def test_the_rank_that_really_died_first_is_named_with_its_exit_code_and_last_line(tmp_path):
    # Rank 1 leaves with os._exit (no exception, no record); rank 0's barrier breaks right after
    # and rank 0 records that error. The parent's own view of the exits must win.
    for _attempt in range(2):
        result = launch("check_failure.py", "exit", env={"HF_HOME": str(tmp_path)}, timeout=180)
        assert result.returncode == 1 and "UNREACHABLE" not in result.stdout
        assert "2 process(es) failed; rank 1 failed first" in result.stderr, result.stderr
        assert re.search(r"rank 1 \(local rank 1, pid \d+\) exited with code 3: fatal: rank 1 found the disk full",
                         result.stderr), result.stderr
        assert "To enable traceback see" not in result.stderr


def test_a_rank_that_left_early_is_named_not_the_rank_it_left_waiting(tmp_path):
    result = launch("check_failure.py", "leave", env={"HF_HOME": str(tmp_path)}, timeout=180)
    assert result.returncode == 1 and "UNREACHABLE" not in result.stdout
    report = result.stderr[result.stderr.index("drivetrain launch: "):].splitlines()
    assert report[0].startswith("drivetrain launch: rank 1 left early (exited with code 0 while the others still "
                                "ran), and 1 process(es) failed in a collective it never joined"), result.stderr
    assert report[1] == "  rank 1 exited with code 0 before the others: left early"


@pytest.mark.parametrize("how, processes", [(signal.SIGTERM, 2), (signal.SIGINT, 2), (signal.SIGHUP, 1)])
def test_a_signal_to_the_launcher_ends_every_worker_with_one_line(tmp_path, how, processes):
    marker = f"sleep {tmp_path}"  # this run's processes only
    command = [sys.executable, "-m", "drivetrain", "launch", "--cpu", "--num-processes", str(processes), "-q",
               str(SCRIPTS / "check_failure.py"), *marker.split(" ", 1)]
    # as from a terminal, even when the suite itself runs under nohup (SIGHUP ignored, and inherited)
    previous = signal.signal(how, signal.SIG_DFL) if signal.getsignal(how) is signal.SIG_IGN else None
    try:
        launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=clean_environ(HF_HOME=str(tmp_path)), start_new_session=True)
    finally:
        if previous is not None:
            signal.signal(how, previous)
    try:
        started = sorted(launcher.stdout.readline().rsplit(" ", 1)[0] for _rank in range(processes))
        assert started == [f"STARTED {rank}" for rank in range(processes)], started
        launcher.send_signal(how)
        _out, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 128 + how, err
        assert err.strip() == f"drivetrain launch: stopped by {how.name}; every worker was ended", err
        time.sleep(1)
        left = subprocess.run(["pgrep", "-f", f"check_failure.py {marker}"], capture_output=True, text=True)
        assert left.stdout.strip() == "", "workers outlived the launcher"
    finally:  # a failed check must not leave a launcher and its workers behind
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()


def test_workers_end_when_the_launcher_is_killed_with_sigkill(tmp_path):
    # SIGKILL gives the launcher no chance to stop its workers: they end by themselves.
    command = [sys.executable, "-m", "drivetrain", "launch", "--cpu", "--num-processes", "2", "-q",
               str(SCRIPTS / "check_failure.py"), "sleep", str(tmp_path)]
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=clean_environ(HF_HOME=str(tmp_path)), start_new_session=True)
    pids = []
    try:
        pids = sorted(int(launcher.stdout.readline().split()[2]) for _rank in range(2))
        launcher.kill()
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in pids if _running(pid)], "workers outlived their launcher"
    finally:  # a failed check must not leave workers behind
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def test_a_worker_under_another_launcher_ends_when_drivetrains_launcher_is_killed(tmp_path):
    # launcher -> intermediate launcher (DeepSpeed's, say: it knows nothing of ours) -> worker.
    # The worker's parent outlives the launcher, so the parent-death signal cannot help: the
    # worker watches the launcher named in DRIVETRAIN_LAUNCHER.
    worker = ("import os, time\nfrom drivetrain.worker_lifetime import die_with_launcher\ndie_with_launcher()\n"
              "print(os.getpid(), flush=True)\ntime.sleep(120)\n")
    middle = (f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {worker!r}])\n"
              "print(__import__('os').getpid(), flush=True)\ntime.sleep(120)\n")
    launcher = ("import os, subprocess, sys, time\nfrom drivetrain.worker_lifetime import LAUNCHER_VARIABLE, "
                "launcher_identity\nos.environ[LAUNCHER_VARIABLE] = launcher_identity()\n"
                f"subprocess.Popen([sys.executable, '-c', {middle!r}])\ntime.sleep(120)\n")
    process = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True, env=clean_environ())
    pids = []
    try:
        pids = [int(process.stdout.readline()) for _process in range(2)]  # the middle one and the worker
        middle_pid, worker_pid = sorted(pids, key=lambda pid: _parent(pid) == process.pid, reverse=True)
        process.kill()
        process.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _running(worker_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(worker_pid), "the worker outlived its launcher"
        assert _running(middle_pid)  # not armed: only the worker is drivetrain's
    finally:
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan that ended waits for its new parent to collect it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_failure_summary_orders_ranks_by_when_they_failed():
    from types import SimpleNamespace

    from drivetrain.launchers import failure_summary

    def failed(rank):
        return SimpleNamespace(local_rank=rank, pid=100 + rank, exitcode=1, timestamp=0, message="")

    error = SimpleNamespace(failures={0: failed(0), 1: failed(1)})
    # rank 1 raised first; its teardown broke rank 0, which raised and ended before rank 1 ended
    summary = failure_summary(error, recorded={1: (10.0, "ValueError: first"), 0: (10.2, "RuntimeError: peer")},
                              exits={0: (10.3, 1), 1: (10.6, 1)})
    assert "rank 1 failed first" in summary and summary.index("rank 1 (") < summary.index("rank 0 (")
    # rank 1 left through os._exit (no record); rank 0 recorded the broken connection after that
    summary = failure_summary(error, recorded={0: (10.2, "RuntimeError: peer")}, exits={0: (10.3, 1), 1: (10.1, 3)},
                              last_lines={1: "fatal: the disk is full"})
    assert "rank 1 failed first" in summary and "rank 1 (local rank 1, pid 101) exited with code 3: fatal" in summary
    # under load the parent may see rank 1's exit after rank 0 recorded the connection rank 1's death broke
    reset = "RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:27836: Connection reset by peer."
    summary = failure_summary(error, recorded={0: (10.0, reset)}, exits={0: (10.3, -15), 1: (10.1, 3)},
                              last_lines={1: "fatal: the disk is full"})
    assert "rank 1 failed first" in summary and "exited with code 3: fatal: the disk is full" in summary


def test_the_failure_summary_names_a_rank_that_left_early_as_the_cause():
    from types import SimpleNamespace

    from drivetrain.launchers import failure_summary

    closed = ("DistributedOperationException: gather() failed across processes (gloo all_gather_into: Connection "
              "closed by peer [127.0.0.1]:30618.): ...")
    error = SimpleNamespace(failures={0: SimpleNamespace(local_rank=0, pid=100, exitcode=1, timestamp=0, message="")})
    # rank 1's script ended (exit code 0, dated after rank 0's record: its connections closed first)
    for code in (0, None):  # None: torch's agent collected it before the watcher read its code
        summary = failure_summary(error, recorded={0: (10.0, closed)}, exits={0: (10.3, 1), 1: (10.2, code)})
        first, *rest = summary.splitlines()
        assert first.startswith("drivetrain launch: rank 1 left early (exited with code 0 while the others still "
                                "ran), and 1 process(es) failed in a collective it never joined"), first
        assert "look at why rank 1 ended first" in first
        assert rest[0] == "  rank 1 exited with code 0 before the others: left early"
        assert rest[1].startswith("  rank 0 (local rank 0, pid 100) exited with code 1: DistributedOperationException")
    # a rank that failed on its own stays the one named, whoever else ended cleanly
    summary = failure_summary(error, recorded={0: (10.0, "ValueError: bad batch")}, exits={0: (10.3, 1), 1: (10.2, 0)})
    assert summary.splitlines()[0] == "drivetrain launch: 1 process(es) failed; rank 0 failed first"


def test_the_failure_summary_names_the_rank_that_hung_not_the_one_that_timed_out():
    from types import SimpleNamespace

    from drivetrain.launchers import failure_summary

    def failed(rank, code):
        return SimpleNamespace(local_rank=rank, pid=100 + rank, exitcode=code, timestamp=0, message="")

    timeout = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 15000ms for recv"
    error = SimpleNamespace(failures={0: failed(0, 1), 1: failed(1, -15)})
    # rank 1 hung (no error of its own, ended by the launcher); rank 0 timed out waiting for it
    summary = failure_summary(error, recorded={0: (10.0, timeout)}, exits={0: (10.1, 1), 1: (10.2, -15)})
    assert "rank 1 failed first" in summary and summary.index("rank 1 (") < summary.index("rank 0 (")
    assert "rank 1 (local rank 1, pid 101) was killed by signal 15 (SIGTERM): did not answer; the others timed " \
           "out waiting for it" in summary
    # seen stopped (SIGSTOP) by the launcher as rank 0 failed
    summary = failure_summary(error, recorded={0: (10.0, timeout)}, exits={0: (10.1, 1), 1: (10.2, -15)},
                              stopped={1: 10.1})
    assert "rank 1 failed first" in summary and ": it was stopped (SIGSTOP) and did not answer" in summary
    # the error that timed out names the rank it waited for
    error = SimpleNamespace(failures={0: failed(0, 1), 1: failed(1, 1), 2: failed(2, 1)})
    summary = failure_summary(error, recorded={0: (10.0, "CheckpointError: rank 2 did not answer: its files ..."),
                                               1: (10.1, timeout), 2: (10.3, timeout)})
    assert "rank 2 failed first" in summary
    # every rank timed out (say, waiting in different collectives): the first stays first
    error = SimpleNamespace(failures={0: failed(0, 1), 1: failed(1, 1)})
    summary = failure_summary(error, recorded={0: (10.0, timeout), 1: (10.1, timeout)})
    assert "rank 0 failed first" in summary
