"""Checkpoint on preemption: ``ProjectConfiguration(save_on_preemption=True)`` and ``drivetrain launch``
passing the signal on (docs/fault-tolerance.md, "Preemption")."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest
import torch
from launching import SCRIPTS

from test_fault_tolerance import SCRIPT, _assert_same, _params, uninterrupted  # noqa: F401  (a fixture)


def test_the_preemption_options_are_checked(fresh_state, cli, tmp_path):
    from drivetrain import Accelerator, ConfigError
    from drivetrain.utils import ProjectConfiguration

    with pytest.raises(ConfigError, match=r"'SIGFOO', not a signal .*choose among SIGTERM, SIGUSR1, SIGUSR2"):
        ProjectConfiguration(save_on_preemption=True, preemption_signals=["SIGTERM", "SIGFOO"])
    with pytest.raises(ConfigError, match="names no signal"):
        ProjectConfiguration(preemption_signals=[])
    with pytest.raises(ConfigError, match="must be True or False"):
        ProjectConfiguration(save_on_preemption="yes")
    config = ProjectConfiguration(save_on_preemption=True, preemption_signals=["term", signal.SIGUSR2, "SIGTERM"])
    assert config.preemption_signals == ("SIGTERM", "SIGUSR2")
    with pytest.raises(ConfigError, match="set automatic_checkpoint_naming=True"):
        Accelerator(project_config=ProjectConfiguration(project_dir=str(tmp_path), save_on_preemption=True))
    script = tmp_path / "train.py"
    script.write_text("")
    refused = cli("launch", "--cpu", "--preemption-grace", "0", str(script))
    assert refused.returncode == 2 and "--preemption-grace must be" in refused.stderr, refused.stderr
    refused = cli("launch", "--cpu", str(script), env={"DRIVETRAIN_PREEMPTION_GRACE": "soon"})
    assert refused.returncode == 2 and "DRIVETRAIN_PREEMPTION_GRACE='soon'" in refused.stderr, refused.stderr


def _fake_scontrol(directory, requeue: int = 1):
    """An ``scontrol`` that records its arguments, one call per line, and shows a job with ``Requeue=requeue``."""
    calls = directory / "scontrol-calls"
    program = directory / "scontrol"
    program.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n"
                       f"if [ \"$1\" = show ]; then echo \"JobId=$3 JobName=train Requeue={requeue} Restarts=0 "
                       "BatchFlag=1\"; fi\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return calls


def test_a_signal_saves_the_step_reached_requeues_the_slurm_job_and_exits_75(fresh_state, tmp_path, monkeypatch):
    """One process, SIGTERM to itself after step 3 of a 2-batch accumulation window: the
    processes agree at the next window's end, where the run saves (through save_state: automatic
    name, total_limit), asks a fake scontrol to requeue the job and exits with 75."""
    from torch.utils.data import DataLoader, TensorDataset

    from drivetrain import Accelerator
    from drivetrain.services import preemption
    from drivetrain.services.checkpointing import layout
    from drivetrain.utils import ProjectConfiguration

    calls = _fake_scontrol(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    accelerator = Accelerator(gradient_accumulation_steps=2, project_config=ProjectConfiguration(
        project_dir=str(tmp_path / "run"), automatic_checkpoint_naming=True, total_limit=1, save_on_preemption=True))
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    trained = 0
    try:
        with pytest.raises(SystemExit) as stop:
            for x, y in loader:
                with accelerator.accumulate(model):
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
                trained += 1
                if trained == 1:
                    accelerator.save_state()  # checkpoint_0: total_limit=1 rotates it away
                if trained == 3:
                    os.kill(os.getpid(), signal.SIGTERM)
                    os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler's and the launcher's copy: one stop
    finally:
        if preemption._armed is not None:
            preemption._armed.uninstall()
    assert stop.value.code == 75
    # flag raised before the boundary of batch 4 (the maximum starts there), agreed at batch 6
    assert trained == 6
    checkpoints = layout.automatic_checkpoints(tmp_path / "run" / "checkpoints")
    assert [number for number, _path in checkpoints] == [1]
    saved = json.loads((checkpoints[0][1] / "dataloader_0.json").read_text())["tree"]
    assert (saved["epoch"], saved["batches_yielded"]) == (0, 6)  # the loader's position after the step reached
    assert calls.read_text().splitlines() == ["show job 4242", "requeue 4242"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the run's handlers are gone with it
    assert preemption._armed is None


def test_a_job_that_does_not_allow_requeueing_is_left_alone(tmp_path, caplog):
    from drivetrain.services.preemption import requeue_slurm_job, slurm_job_to_requeue

    calls = _fake_scontrol(tmp_path, requeue=0)
    environ = {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "7",
               "SLURM_ARRAY_JOB_ID": "5", "SLURM_ARRAY_TASK_ID": "3"}
    assert slurm_job_to_requeue(environ) == "5_3"
    assert not requeue_slurm_job(environ)
    assert calls.read_text().splitlines() == ["show job 5_3"]
    assert "was not requeued: it does not allow it (Requeue=0" in caplog.text
    assert not requeue_slurm_job({"PATH": str(tmp_path)})  # not under SLURM: nothing asked
    assert calls.read_text().splitlines() == ["show job 5_3"]


@pytest.mark.multiprocess
def test_the_launcher_waits_for_its_workers_up_to_the_grace_period_and_no_longer_after_a_second_signal(tmp_path):
    """Workers that ignore the signal passed on (SIGUSR1, passed on as SIGTERM is): the launcher
    kills them once --preemption-grace has passed; with a long grace period, a second signal
    kills them at once. Either way no worker outlives the launcher."""
    from conftest import clean_environ

    marker = f"deaf {tmp_path}"
    for grace, signals in (("3", [signal.SIGUSR1]), ("120", [signal.SIGTERM, signal.SIGTERM])):
        launcher = subprocess.Popen(
            [sys.executable, "-m", "drivetrain", "launch", "--cpu", "--num-processes", "2", "-q", "--preemption-grace",
             grace, str(SCRIPTS / "check_failure.py"), *marker.split(" ", 1)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_environ(), start_new_session=True)
        try:
            started = sorted(launcher.stdout.readline().rsplit(" ", 1)[0] for _rank in range(2))
            assert started == ["STARTED 0", "STARTED 1"], started
            sent = time.monotonic()
            for signum in signals:
                launcher.send_signal(signum)
                time.sleep(1)
            _out, err = launcher.communicate(timeout=60)
            took = time.monotonic() - sent
            assert launcher.returncode == 128 + signals[0], err
            assert f"stopped by {signals[0].name}; every worker was ended" in err, err
            if grace == "3":
                assert 3 <= took < 30, took  # waited out the grace period, and no longer
            else:
                assert took < 30, took  # the second signal, not the 120 s
            left = subprocess.run(["pgrep", "-f", f"check_failure.py {marker}"], capture_output=True, text=True)
            assert left.stdout.strip() == "", "workers outlived the launcher"
        finally:
            if launcher.poll() is None:
                os.killpg(launcher.pid, signal.SIGKILL)
                launcher.communicate()


def _launch_and_preempt(out, strategy: str, *launch_args: str, after_step: int = 4, only_rank_1: bool = False,
                        signum: int = signal.SIGTERM) -> subprocess.CompletedProcess:
    """``drivetrain launch`` of the fault-tolerance script with ``--preempt`` (slowed down), sent
    ``signum`` once the main process has printed ``trained step <after_step>``; with
    ``only_rank_1``, rank 1's process alone gets it."""
    from conftest import clean_environ

    command = [sys.executable, "-m", "drivetrain", "launch", "--cpu", "--num-processes", "2", *launch_args,
               str(SCRIPTS / SCRIPT), str(out), strategy, "--preempt", "--step-seconds", "0.3"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_environ())
    lines = []
    try:
        deadline = time.monotonic() + 180
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == f"trained step {after_step}":
                if only_rank_1:
                    (pid,) = [int(seen.split()[2]) for seen in lines if seen.startswith("worker 1 ")]
                    os.kill(pid, signum)
                else:
                    proc.send_signal(signum)
                break
            assert time.monotonic() < deadline, "".join(lines)
        out_rest, err = proc.communicate(timeout=60)  # bounded: the grace period is 30 s at most
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(command, proc.returncode, "".join(lines) + out_rest, err)


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.parametrize("strategy, only_rank_1, launch_args, signum", [
    ("ddp", False, (), signal.SIGTERM), ("fsdp2", False, (), signal.SIGTERM), ("ddp", True, (), signal.SIGTERM),
    pytest.param("ddp", False, ("--rdzv-backend", "c10d"), signal.SIGUSR1, marks=pytest.mark.skip(
        reason="known race: torch's elastic agent may end the other worker when the first exits with 75, "
               "before it exits with 75 itself; the launcher then reports an incomplete preemption"))],
    ids=["ddp", "fsdp2", "ddp-one-rank-signalled", "ddp-sigusr1-through-torch-agent"])
def test_sigterm_to_the_launcher_saves_the_step_reached_and_the_job_resumes_bitwise_equal(
        tmp_path, strategy, only_rank_1, launch_args, signum, uninterrupted):  # noqa: F811
    """SIGTERM to ``drivetrain launch`` mid-epoch (2 processes, save_on_preemption): both ranks
    stop at the same optimizer step, the newest checkpoint holds that step, the launcher exits
    with 75 within the grace period, and the same command run again resumes from that checkpoint
    and ends with the parameters of a run that was never preempted. With the signal sent to rank
    1 alone, the two ranks still stop at one step (a split job would hang in the save's
    collectives) and the launcher, which got no signal, does not restart them. SIGUSR1 (SLURM's
    --signal) to a launch through torch's elastic agent (--rdzv-backend c10d) does the same."""
    from conftest import clean_environ

    from drivetrain.services.checkpointing import layout

    out = tmp_path / "job"
    started = time.monotonic()
    preempted = _launch_and_preempt(out, strategy, "--preemption-grace", "30", "--max-restarts", "1", *launch_args,
                                    only_rank_1=only_rank_1, signum=signum)
    assert preempted.returncode == 75, preempted.stderr
    assert time.monotonic() - started < 180
    by = "a signal to the workers" if only_rank_1 else signal.Signals(signum).name
    assert f"preempted by {by}; every worker saved a checkpoint and exited with code 75" in preempted.stderr
    reached = max(int(line.split()[-1]) for line in preempted.stdout.splitlines() if line.startswith("trained step"))
    assert reached > 4 and reached % 2 == 0, preempted.stdout  # the end of an accumulation window past the signal
    newest = layout.automatic_checkpoints(out / "checkpoints")[-1][1]
    assert json.loads((newest / "custom_checkpoint_0.json").read_text())["tree"]["step"] == reached
    assert not (out / "final.pt").exists()

    command = [*preempted.args[:-3]]  # the same command, without --preempt's slow-down
    resumed = subprocess.run([*command, "--preempt"], capture_output=True, text=True, env=clean_environ(), timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    first_resumed = min(int(line.split()[-1]) for line in resumed.stdout.splitlines() if line.startswith("trained"))
    assert first_resumed == reached + 1, resumed.stdout
    _assert_same(uninterrupted(strategy), _params(out), f"{strategy} preempted and resumed")
