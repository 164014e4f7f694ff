"""Start a function on several processes from Python: ``notebook_launcher`` and ``debug_launcher``.

Both fork the current process through torch's elastic agent
(``torch.distributed.launcher.api.elastic_launch`` with ``start_method="fork"``), so a
function defined in a notebook cell runs as it is, and a failed rank is reported by the same
machinery as ``drivetrain launch``. Each worker starts with a fresh process state; the choice
of platform, strategy and precision is made once, here, and handed to every worker.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import socket
import sys
import tempfile
import time
import uuid
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..kernel.errors import ConfigError, LaunchError
from ..runtime.collective_watch import ERRORS_DIR_VARIABLE, rank_records
from .hang_report import recorded_collectives

__all__ = ["notebook_launcher", "debug_launcher", "failure_summary", "record_failure", "recorded_failures"]


_TORCH_BOILERPLATE = "To enable traceback see"
# An error that only says a peer did not answer in time, or that the connection to a peer broke
# (gloo's "Read error ... Connection reset by peer" when a peer died): its rank waited for, or
# was cut off by, the one at fault.
_TIMED_OUT = re.compile(r"timed out|timeout|did not answer|connection reset by peer|connection closed by peer|"
                        r"broken pipe", re.IGNORECASE)
# ... unless it names that peer (the checkpoint commit's "rank 1 did not answer").
_NAMED_PEER = re.compile(r"\branks? (\d+)[\d, ]* did not answer")


def failure_summary(error: Any, title: str = "drivetrain launch",
                    recorded: Mapping[int, tuple[float, str]] | None = None,
                    exits: Mapping[int, tuple[float, int | None]] | None = None,
                    last_lines: Mapping[int, str] | None = None,
                    stopped: Mapping[int, float] | None = None,
                    collectives: Mapping[int, dict] | None = None) -> str:
    """One line per failed rank of a ``ChildFailedError``: which rank, how it ended and its error.

    The rank at fault is named first; the others usually stopped because of it. ``exits`` maps
    a rank to ``(time, exit code or -signal)`` as its parent saw the process end
    (:class:`~drivetrain.process_exits.ExitWatcher`); ``recorded`` maps a rank to ``(time,
    error)`` its worker wrote itself when it raised; the earlier of the two orders the ranks.
    ``last_lines`` maps a rank to the last line it wrote to stderr, the reason given when it
    recorded no error (``os._exit``, a signal). ``stopped`` holds the ranks seen stopped
    (``SIGSTOP``) when another failed. ``collectives`` maps a rank to the report of the
    collective it was in when one failed or timed out (:mod:`.hang_report`): they are shown side
    by side, and a rank that never arrived in the collective the others waited in is the culprit.

    A rank whose error is a timeout waiting for its peers, or a connection a dead peer broke,
    is a victim, not the culprit, even when it failed first: the culprit is a stopped rank, else a
    rank that never arrived in the collective the others waited in (``collectives``), else the
    rank such an error names, else the first rank that failed otherwise (one that recorded no
    error is one that hung).
    """
    from ..runtime.process_exits import describe_exit
    from .hang_report import culprit_reason, hang_lines

    recorded, exits, last_lines = dict(recorded or {}), dict(exits or {}), dict(last_lines or {})
    stopped, collectives = dict(stopped or {}), dict(collectives or {})
    failures = dict(getattr(error, "failures", {}) or {})
    # a rank its parent saw fail counts even without torch's record of it (an earlier attempt)
    ended_badly = {rank for rank, (_at, code) in exits.items() if code not in (0, None)}
    if not failures and not recorded and not ended_badly and not stopped:
        return f"{title}: {error}"
    ranks = sorted(set(failures) | set(recorded) | set(stopped) | ended_badly)

    def code_of(rank: int) -> int | None:
        if rank in exits and exits[rank][1] is not None:
            return exits[rank][1]
        return failures[rank].exitcode if rank in failures else None

    def order(rank: int) -> tuple:
        # A rank failed when it recorded its error (raised) or, without a record, when its
        # parent saw it end (os._exit, a signal): the earlier of the two. A rank that raised
        # may end after the ranks its teardown broke, so its end alone would misorder it.
        # Ties go to a rank that ended on its own over one the launcher stopped by a signal.
        code = code_of(rank)
        killed = code is not None and code < 0
        times = [at for at in (exits.get(rank, (None,))[0], recorded.get(rank, (None,))[0]) if at is not None]
        if times:
            return (0, min(times), killed, rank)
        failure = failures.get(rank)
        return (1, (failure.timestamp if failure is not None else None) or float("inf"), killed, rank)

    def own_reason(rank: int) -> str:
        if rank in recorded:
            return recorded[rank][1]
        failure = failures.get(rank)
        if failure is not None:
            message = failure.message
            if isinstance(message, dict):
                message = message.get("message", "")
            text = [line.strip() for line in str(message or "").splitlines() if line.strip()]
            if text and _TORCH_BOILERPLATE not in text[-1] and "received by PID" not in text[-1]:
                return text[-1]
        return last_lines.get(rank, "")

    reasons = {rank: own_reason(rank) for rank in ranks}
    waited = {rank for rank in ranks if _TIMED_OUT.search(reasons[rank])}
    first_rank = min(ranks, key=order)
    hung = False
    if stopped:
        first_rank, hung = min(stopped, key=lambda rank: (stopped[rank], rank)), True
    elif first_rank in waited:
        named = [int(found.group(1)) for rank in sorted(waited, key=order)
                 for found in [_NAMED_PEER.search(reasons[rank])] if found and int(found.group(1)) in ranks]
        others = [rank for rank in ranks if rank not in waited]
        if named or others:
            first_rank, hung = (named[0] if named else min(others, key=order)), True
    # A rank that ended cleanly while the others failed in a collective is told as leaving early;
    # otherwise the ranks' collective reports name the one that never arrived.
    left = _left_early(exits, ranks) if first_rank in waited and not hung else []
    job_ranks = set(ranks) | set(exits) | set(collectives)
    absent = culprit_reason(collectives, job_ranks) if not stopped and not left else None
    if absent is not None:
        first_rank, hung = absent[0], True
        # a rank that ended by itself (an error, an exit code) is told by that, not by where it was not
        died = first_rank in recorded or (code_of(first_rank) or 0) > 0
        if not died or _TIMED_OUT.search(reasons.get(first_rank, "")):
            reasons[first_rank] = absent[1]
        ranks = sorted(set(ranks) | {first_rank})
    if left:
        # Nobody failed on its own: the first failure is a broken connection or a timeout, and
        # ranks ended cleanly. They skipped a collective the others were in.
        who = ("rank " if len(left) == 1 else "ranks ") + ", ".join(map(str, left))
        lines = [f"{title}: {who} left early (exited with code 0 while the others still ran), and "
                 f"{len(ranks)} process(es) failed in a collective {'it' if len(left) == 1 else 'they'} never "
                 f"joined: every rank must reach the same collectives (gather, wait_for_everyone, save_state...); "
                 f"look at why {who} ended first"]
        lines += [f"  rank {rank} exited with code 0 before the others: left early" for rank in left]
    else:
        lines = [f"{title}: {len(ranks)} process(es) failed; rank {first_rank} failed first"]
    for rank in [first_rank, *(r for r in ranks if r != first_rank)]:
        failure = failures.get(rank)
        code = code_of(rank)
        reason = reasons[rank]
        if rank == first_rank and rank in stopped:
            reason = "it was stopped (SIGSTOP) and did not answer: look at what stopped it (a debugger, job control)"
        elif rank == first_rank and hung and not reason:
            reason = ("did not answer; the others timed out waiting for it: look at this rank, or raise the "
                      "collective timeout if it was only busy")
        elif not reason and code is not None and code < 0 and rank != first_rank:
            reason = "stopped by the launcher after another rank failed"
        if failure is not None:
            how = f"(local rank {failure.local_rank}, pid {failure.pid}) {describe_exit(code)}"
        else:
            how = describe_exit(code) if rank in exits else ("was stopped" if rank in stopped else "raised")
        lines.append(f"  rank {rank} {how}: {reason or 'no error recorded (see its output above)'}")
    lines.extend(hang_lines(collectives, job_ranks))
    return "\n".join(lines)


def _left_early(exits: Mapping[int, tuple[float, int | None]], failed: list[int]) -> list[int]:
    """Ranks that ended cleanly while others failed in a collective. A rank torch's agent collected
    before the watcher saw its code (``None``) and that is not among the failed ones ended with 0.
    Not ordered by time: a rank's process ends after its connections close, which is what the
    others record, so its end is often dated after their failure."""
    return sorted(rank for rank, (_at, code) in exits.items() if code in (0, None) and rank not in failed)


def free_port() -> int:
    """A TCP port free on this machine now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: The module every launched process runs (``python -m CHILD_MODULE --script PATH ...``): it
#: records an uncaught exception where the launcher reads it.
CHILD_MODULE = "drivetrain.cli.child"
#: How a process ends after it saved a checkpoint on a preemption signal, and how
#: ``drivetrain launch`` ends when every process did: ``EX_TEMPFAIL`` of ``sysexits.h``
#: ("try again later"), which a scheduler's retry policy can match (Kubernetes'
#: ``podFailurePolicy`` ``onExitCodes``). Not 128 + a signal: the job was not killed, it saved.
PREEMPTED_EXIT_CODE = 75


#: Seconds the workers get to end after a signal the launcher passes on (torch's agent's grace).
DEFAULT_PREEMPTION_GRACE = 30.0


def preemption_grace(args: Any) -> float:
    """Seconds the workers get to end after a signal the launcher passed on: ``--preemption-grace``,
    else ``DRIVETRAIN_PREEMPTION_GRACE``, else torch's agent's 30 s."""
    from ..kernel import environment

    given = getattr(args, "preemption_grace", None)
    if given is not None:
        return float(given)
    return float(environment.read_checked("PREEMPTION_GRACE", default=DEFAULT_PREEMPTION_GRACE))


def record_failure(exc: BaseException, errors: str | None = None) -> None:
    """Write ``exc`` with the time to ``<errors>/<rank>.json`` so the launcher can tell which
    rank failed first (to the sub-second) and why. Does nothing without a directory."""
    errors = errors or os.environ.get(ERRORS_DIR_VARIABLE)
    if not errors or (isinstance(exc, SystemExit) and exc.code in (0, None, PREEMPTED_EXIT_CODE)):
        return
    rank = os.environ.get("RANK", "0")
    try:
        with open(os.path.join(errors, f"{rank}.json"), "w", encoding="utf-8") as handle:
            json.dump({"time": time.time(), "error": f"{type(exc).__name__}: {exc}"}, handle)
    except OSError:  # reporting must never hide the error itself
        pass


def recorded_failures(errors: str) -> dict[int, tuple[float, str]]:
    """What :func:`record_failure` wrote (``<rank>.json``): rank -> (time, error)."""
    found = {}
    for rank, data in rank_records(errors, ".json"):
        try:
            found[rank] = (float(data["time"]), " ".join(str(data["error"]).split()))
        except (KeyError, TypeError, ValueError):
            continue
    return found


def _worker(function: Callable[..., Any], env: Mapping[str, str], errors: str) -> Callable[..., Any]:
    """What each forked worker runs: its environment, a fresh process state, then the function."""
    env = dict(env)

    @functools.wraps(function)
    def run_in_worker(*args: Any) -> Any:
        os.environ.update(env)
        from ..runtime.state import AcceleratorState, GradientState, PartialState

        AcceleratorState._reset_state(reset_partial_state=True)
        PartialState._reset_state()
        GradientState._reset_state()
        try:
            return function(*args)
        except BaseException as exc:
            record_failure(exc, errors)
            raise

    return run_in_worker


def _refuse_if_started(platform: Any) -> None:
    """Workers are forked: nothing that cannot be forked may exist in this process yet."""
    from ..runtime.state import PartialState, is_initialized

    if is_initialized() and PartialState().num_processes > 1:
        raise ConfigError("this process already belongs to a multi-process run; notebook_launcher must start the "
                          "processes itself: restart the kernel and create the Accelerator inside the function")
    try:
        import torch.distributed as dist

        group_exists = dist.is_available() and dist.is_initialized()
    except ImportError:  # pragma: no cover - torch without distributed support
        group_exists = False
    if group_exists:
        raise ConfigError("a torch.distributed process group already exists in this process; restart the kernel "
                          "and create the Accelerator only inside the function given to notebook_launcher")
    if platform.is_initialized():
        raise ConfigError(f"the {platform.name} device was already initialised in this process, so forked workers "
                          "cannot use it; restart the kernel and touch the device only inside the launched function "
                          "(set DRIVETRAIN_DEBUG_MODE=1 to find the cell that does)")


def _launch(function: Callable[..., Any], args: Sequence[Any], *, num_processes: int, num_nodes: int,
            node_rank: int, endpoint: str, rdzv_backend: str, rdzv_conf: Mapping[str, Any] | None,
            rdzv_id: str, max_restarts: int, monitor_interval: float, log_line_prefix_template: str | None,
            env: Mapping[str, str], title: str) -> None:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    configs = dict(rdzv_conf or {})
    if rdzv_backend == "static":
        configs.setdefault("rank", node_rank)
    config = LaunchConfig(
        min_nodes=num_nodes, max_nodes=num_nodes, nproc_per_node=num_processes // num_nodes,
        run_id=rdzv_id if rdzv_id not in (None, "", "none") else uuid.uuid4().hex,
        rdzv_endpoint=endpoint, rdzv_backend=rdzv_backend, rdzv_configs=configs,
        max_restarts=max_restarts, monitor_interval=monitor_interval, start_method="fork",
        log_line_prefix_template=log_line_prefix_template,
    )
    with tempfile.TemporaryDirectory(prefix="drivetrain-errors-") as errors:
        try:
            elastic_launch(config=config, entrypoint=_worker(function, _with_aliases(env), errors))(*args)
        except ChildFailedError as error:
            summary = failure_summary(error, title, recorded_failures(errors), collectives=recorded_collectives(errors))
            raise _workers_failed(summary, error) from error


@functools.lru_cache(maxsize=1)
def _workers_failed_error() -> type:
    """``WorkersFailedError``, made on first use (torch's elastic package is imported then)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    class WorkersFailedError(LaunchError, ChildFailedError):
        """A worker of ``notebook_launcher`` / ``debug_launcher`` failed: our ``LaunchError`` with
        the per-rank summary, and torch's ``ChildFailedError`` (``name``, ``failures``), which
        Accelerate's launchers let through and code written for them catches."""

        def __init__(self, summary: str, name: str, failures: Any) -> None:
            Exception.__init__(self, summary)
            self.name, self.failures = name, failures

        __str__ = Exception.__str__

    return WorkersFailedError


def _workers_failed(summary: str, error: Any) -> LaunchError:
    return _workers_failed_error()(summary, error.name, error.failures)


def _choice_environment(requests: Any, world_size: int) -> tuple[dict[str, str], Any]:
    """The resolved choice for a job of ``world_size`` processes, as the workers' variables."""
    from ..kernel.cluster import ClusterEnvironment
    from ..kernel.plugin_manager import get_plugin_manager
    from ..selection.choice import requests_from_env, select

    manager = get_plugin_manager()
    selection = select(manager, requests.merged_over(requests_from_env(manager)),
                       cluster=ClusterEnvironment(name="notebook", world_size=world_size))
    env = dict(selection.child_environment())
    env["DRIVETRAIN_FORK_LAUNCHED"] = "1"
    return env, manager.construct(selection.platform_plugin, selection.platform,
                                  f"platform {selection.platform.name!r}")


def _with_aliases(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` plus the ``ACCELERATE_*`` copy of each ``DRIVETRAIN_*`` variable, so that a
    value left in the notebook's environment under Accelerate's name cannot contradict it."""
    full = dict(env)
    for key, value in env.items():
        if key.startswith("DRIVETRAIN_"):
            full["ACCELERATE_" + key[len("DRIVETRAIN_"):]] = value
    return full


@contextlib.contextmanager
def _patched_environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def notebook_launcher(
    function: Callable[..., Any],
    args: Sequence[Any] = (),
    num_processes: int | None = None,
    mixed_precision: str = "no",
    use_port: str | int = "29500",
    master_addr: str = "127.0.0.1",
    node_rank: int = 0,
    num_nodes: int = 1,
    rdzv_backend: str = "static",
    rdzv_endpoint: str = "",
    rdzv_conf: Mapping[str, Any] | None = None,
    rdzv_id: str = "none",
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    log_line_prefix_template: str | None = None,
) -> None:
    """Run ``function(*args)`` on ``num_processes`` processes of this machine (from a notebook).

    Args:
        function: the training function. Create the ``Accelerator`` inside it, not before.
        args: its positional arguments.
        num_processes: processes on this machine; by default one per device of the detected
            platform. With one process (or none given on a CPU) the function runs here.
        mixed_precision: ``"no"``, ``"fp16"``, ``"bf16"`` or another installed precision.
        use_port: port of the rendezvous on ``master_addr``.
        master_addr: address of machine 0.
        node_rank: this machine's index when several take part (``num_nodes``).
        num_nodes: machines taking part; start the same cell on each.
        rdzv_backend: ``"static"`` or ``"c10d"`` (elastic, with ``max_restarts``).
        rdzv_endpoint: ``host:port`` of the rendezvous (default ``master_addr:use_port``).
        rdzv_conf: extra rendezvous options.
        rdzv_id: identifier shared by the machines of one job.
        max_restarts: times the workers are restarted after a failure.
        monitor_interval: seconds between checks of the workers.
        log_line_prefix_template: prefix of each output line (``"[${rank}]:"``).

    Raises:
        drivetrain.errors.LaunchError: a worker failed; the message names the rank and its error.
    """
    from ..selection.choice import Requests

    precision = str(getattr(mixed_precision, "value", mixed_precision) or "no").lower()
    requests = Requests(mixed_precision=None if precision == "no" else precision)
    if num_processes is None:
        from ..kernel.plugin_manager import get_plugin_manager
        from ..selection.choice import CPU_PLATFORM, choose_platform

        manager = get_plugin_manager()
        candidate, _reason = choose_platform(manager, requests)
        num_processes = 1 if candidate.spec.name == CPU_PLATFORM else max(int(manager.construct(
            candidate.plugin, candidate.spec, f"platform {candidate.name!r}").device_count() or 1), 1)
    if num_processes < 1:
        raise ConfigError(f"num_processes must be at least 1, not {num_processes}")
    world_size = num_processes * num_nodes
    env, platform = _choice_environment(requests, world_size)
    if world_size == 1:
        print(f"Launching training on one process ({platform.name}).")
        env.pop("DRIVETRAIN_FORK_LAUNCHED")
        with _patched_environment(_with_aliases(env)):
            function(*args)
        return
    _refuse_if_started(platform)
    print(f"Launching training on {num_processes} {platform.name} process(es)"
          + (f" on each of {num_nodes} machines." if num_nodes > 1 else "."))
    sys.stdout.flush()
    _launch(function, args, num_processes=world_size, num_nodes=num_nodes, node_rank=node_rank,
            endpoint=rdzv_endpoint or f"{master_addr}:{use_port}", rdzv_backend=rdzv_backend, rdzv_conf=rdzv_conf,
            rdzv_id=rdzv_id, max_restarts=max_restarts, monitor_interval=monitor_interval,
            log_line_prefix_template=log_line_prefix_template, env=env, title="notebook_launcher")


def debug_launcher(function: Callable[..., Any], args: Sequence[Any] = (), num_processes: int = 2) -> None:
    """Run ``function(*args)`` on ``num_processes`` forked CPU processes, to debug distributed
    code on any machine (gloo on a free local port). Not meant for training.

    Raises:
        drivetrain.errors.LaunchError: a worker failed; the message names the rank and its error.
    """
    from ..selection.choice import Requests

    if num_processes < 1:
        raise ConfigError(f"num_processes must be at least 1, not {num_processes}")
    env, platform = _choice_environment(Requests(cpu=True), num_processes)
    env["DRIVETRAIN_USE_CPU"] = "1"
    _refuse_if_started(platform)
    _launch(function, args, num_processes=num_processes, num_nodes=1, node_rank=0,
            endpoint=f"127.0.0.1:{free_port()}", rdzv_backend="static", rdzv_conf=None, rdzv_id="none",
            max_restarts=0, monitor_interval=0.1, log_line_prefix_template=None, env=env, title="debug_launcher")


def _check_launched_world() -> None:
    from ..runtime.state import PartialState
    from .cross_process import gather_object

    state = PartialState()
    ranks = gather_object([state.process_index])
    if sorted(ranks) != list(range(state.num_processes)):
        raise LaunchError(f"the launched processes report ranks {ranks}, expected 0..{state.num_processes - 1}")


def test_launch(num_processes: int = 2) -> None:
    """Check that launching works here: ``num_processes`` CPU processes start, find each
    other and agree on their ranks (raises :class:`~drivetrain.errors.LaunchError` otherwise)."""
    debug_launcher(_check_launched_world, num_processes=num_processes)
