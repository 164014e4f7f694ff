"""Test helpers (``accelerate.test_utils.testing``): skip decorators, launch commands, subprocesses.

``require_<name>`` decorators that name a device or a library are made on first access from
what is installed, so this module names no backend: ``require_<platform>`` (a platform a plugin
registers), ``require_single_<platform>`` / ``require_multi_<platform>`` (its device count),
``require_non_<platform>``, and ``require_<library>`` for every ``is_<library>_available`` probe
of :mod:`drivetrain.utils` (core, plugin-contributed or fallback). ``gpu`` means any accelerator.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..kernel.contributed import surface_getattr
from ..runtime.environment_helpers import parse_flag_from_env

_Decorator = Callable[[Any], Any]


@lru_cache(maxsize=1)
def _platforms() -> dict[str, Any]:
    """Every registered platform's detection answer, by name (probes run once)."""
    from ..kernel.plugin_manager import get_plugin_manager
    from ..selection.detection import detect

    return {c.name: c for c in detect(get_plugin_manager()).candidates if c.kind == "platform"}


@lru_cache(maxsize=None)
def _device_count(platform: str) -> int:
    from ..kernel.descriptors import resolve

    candidate = _platforms().get(platform)
    if candidate is None or not candidate.available:
        return 0
    return int(resolve(candidate.spec.factory)().device_count() or 0)


def _current_platform() -> str:
    from ..kernel.plugin_manager import get_plugin_manager
    from ..selection.detection import detect

    winner = detect(get_plugin_manager()).platform
    return winner.name if winner is not None else "cpu"


def _accelerator_count() -> int:
    """Devices of the detected accelerator (0 on a CPU-only machine)."""
    current = _current_platform()
    return 0 if current == "cpu" else _device_count(current)


def _device_type() -> str:
    from ..kernel.descriptors import resolve

    candidate = _platforms().get(_current_platform())
    return resolve(candidate.spec.factory)().device_type if candidate is not None else "cpu"


def skip(test_case: Any) -> Any:
    """Always skipped."""
    return unittest.skip("test was skipped")(test_case)


def slow(test_case: Any) -> Any:
    """Run only when ``RUN_SLOW=1``."""
    return unittest.skipUnless(parse_flag_from_env("RUN_SLOW"), "test is slow (set RUN_SLOW=1)")(test_case)


def _require(condition: bool, reason: str) -> _Decorator:
    return unittest.skipUnless(condition, reason)


def require_cpu(test_case: Any) -> Any:
    return _require(_accelerator_count() == 0, "test requires only a CPU")(test_case)


def require_non_cpu(test_case: Any) -> Any:
    return _require(_accelerator_count() > 0, "test requires an accelerator")(test_case)


def require_single_device(test_case: Any) -> Any:
    return _require(_accelerator_count() == 1, "test requires exactly one accelerator device")(test_case)


def require_multi_device(test_case: Any) -> Any:
    return _require(_accelerator_count() > 1, "test requires several accelerator devices")(test_case)


def require_huggingface_suite(test_case: Any) -> Any:
    from ..services import availability

    found = availability.is_transformers_available() and availability.is_datasets_available()
    return _require(found, "test requires transformers and datasets")(test_case)


def require_torch_min_version(test_case: Any = None, version: str | None = None) -> Any:
    from ..selection.versions import is_torch_version

    if test_case is None:
        return lambda case: require_torch_min_version(case, version=version)
    return _require(is_torch_version(">=", version), f"test requires torch >= {version}")(test_case)


def require_fp16(test_case: Any) -> Any:
    from ..services.availability import is_fp16_available

    return _require(is_fp16_available(), "test requires float16 support")(test_case)


def require_tp(test_case: Any) -> Any:
    """Tensor parallelism needs torch >= 2.3 and transformers >= 4.52 (its ``tp_plan``), as in Accelerate."""
    from ..selection.versions import compare_versions, is_torch_version
    from ..services import availability

    found = (is_torch_version(">=", "2.3.0") and availability.is_transformers_available()
             and compare_versions("transformers", ">=", "4.52.0"))
    return _require(found, "test requires torch >= 2.3.0 and transformers >= 4.52.0")(test_case)


def require_trackers(test_case: Any) -> Any:
    from ..services.tracking import get_available_trackers

    return _require(bool(get_available_trackers()), "test requires at least one tracker")(test_case)


def run_first(test_case: Any) -> Any:
    """Mark a test to run before the others (honoured with ``pytest-order`` installed)."""
    try:
        import pytest
    except ImportError:
        return test_case
    return pytest.mark.order(1)(test_case)


def _probe_for(library: str) -> Callable[[], bool] | None:
    """``drivetrain.utils.is_<library>_available``: the core's probe, else a plugin's (or its fallback)."""
    from ..kernel.contributed import resolve_module_name
    from ..services import availability

    name = f"is_{library}_available"
    probe = getattr(availability, name, None)
    if probe is not None:
        return probe
    try:
        return resolve_module_name("utils", name, also_top_level=True)
    except AttributeError:
        return None


def _make_require(name: str) -> _Decorator | None:
    """The decorator ``require_<what>``, from the platforms and probes installed here.
    ``require_<a>_or_<b>`` runs the test when either would (``require_multi_gpu_or_xpu``: the
    ``multi_`` applies to both)."""
    what = name[len("require_"):]
    if "_or_" in what:
        first, *others = what.split("_or_")
        prefix = next((p for p in ("single_", "multi_", "non_") if first.startswith(p)), "")
        parts = [_make_require(f"require_{first}")] + [_make_require(f"require_{prefix}{other}") for other in others]
        if parts[0] is None:
            return None
        def either(case: Any) -> Any:
            runs = any(part is not None and not getattr(part(_probe_case()), "__unittest_skip__", False)
                       for part in parts)
            return _require(runs, f"test requires {what.replace('_', ' ')}")(case)
        return either
    for prefix, test, words in (("single_", lambda n: n == 1, "exactly one"), ("multi_", lambda n: n > 1, "several")):
        if what.startswith(prefix):
            target = what[len(prefix):]
            count = (lambda: _accelerator_count()) if target == "gpu" else (lambda t=target: _device_count(t))
            if target == "gpu" or target in _platforms():
                return lambda case: _require(test(count()), f"test requires {words} {target} device")(case)
    if what.startswith("non_"):
        target = what[len("non_"):]
        if target in _platforms() or _probe_for(target) is not None:
            def absent() -> bool:
                probe = _probe_for(target)
                return _current_platform() != target and not (probe is not None and target not in _platforms() and probe())
            return lambda case: _require(absent(), f"test requires no {target}")(case)
    if what == "gpu" or what in _platforms():
        present = (lambda: _accelerator_count() > 0) if what == "gpu" else (lambda: _device_count(what) > 0)
        return lambda case: _require(present(), f"test requires a {what} device")(case)
    probe = _probe_for(what)
    if probe is not None:
        return lambda case: _require(bool(probe()), f"test requires {what}")(case)
    return None


def _probe_case() -> Any:
    """A throwaway function a ``require_`` decorator can mark as skipped, to read its verdict."""
    return lambda: None


def _require_decorator(name: str) -> Any:
    decorator = _make_require(name) if name.startswith("require_") else None
    if decorator is None:
        raise AttributeError(name)
    return decorator


# Accelerate's module constants of the device here, and a `require_<what>` for every platform and probe
__getattr__ = surface_getattr(__name__, on_request=_require_decorator, computed={
    "torch_device": lambda: _device_type(),
    "device_count": lambda: max(_accelerator_count(), 1),
    "DEFAULT_LAUNCH_COMMAND": lambda: get_launch_command(num_processes=max(_accelerator_count(), 1),
                                                         monitor_interval=0.1),
})


# ----------------------------------------------------------------------------- commands and processes


def get_launch_command(**kwargs: Any) -> list[str]:
    """``drivetrain launch`` (through this interpreter) with ``--key=value`` for each keyword."""
    command = [sys.executable, "-m", "drivetrain", "launch"]
    for key, value in kwargs.items():
        if isinstance(value, bool):
            if value:
                command.append(f"--{key}")
        elif value is not None:
            command.append(f"--{key}={value}")
    return command


class SubprocessCallException(Exception):
    """A command run by :func:`run_command` failed."""


@dataclass
class _RunOutput:
    returncode: int
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


def execute_subprocess_async(cmd: Sequence[str], env: dict[str, str] | None = None, stdin: Any = None,
                             timeout: float = 180, quiet: bool = False, echo: bool = True) -> _RunOutput:
    """Run ``cmd``, echo its output unless ``quiet``, and raise ``RuntimeError`` (with its stderr)
    when it fails. Returns the exit code and the output lines."""
    if echo:
        print("\nRunning:", " ".join(map(str, cmd)))
    result = subprocess.run([str(part) for part in cmd], env=env, input=stdin, capture_output=True, text=True,
                            timeout=timeout)
    output = _RunOutput(result.returncode, result.stdout.splitlines(), result.stderr.splitlines())
    if not quiet:
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))!r} failed with return code {result.returncode}\n\n"
                           "The combined stderr from workers follows:\n" + result.stderr)
    return output


def run_command(command: Sequence[str], return_stdout: bool = False, env: dict[str, str] | None = None) -> str | None:
    """Run ``command``; raise :class:`SubprocessCallException` with its output when it fails."""
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise SubprocessCallException(f"{command!r} failed (exit code {result.returncode}):\n"
                                      f"{result.stdout}{result.stderr}")
    return result.stdout if return_stdout else None


def pytest_xdist_worker_id() -> int:
    """The number of this pytest-xdist worker (``gw3`` is 3), 0 without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


def get_torch_dist_unique_port() -> int:
    """A free port for a process group's rendezvous (one per xdist worker never collide)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def path_in_accelerate_package(*components: str) -> Path:
    """A path inside the installed drivetrain package."""
    return Path(__file__).parent.parent.joinpath(*components)  # this file is drivetrain/test_utils/testing.py


def memory_allocated_func() -> int | None:
    """Bytes allocated on the current device (``None`` where the platform cannot tell)."""
    from ..kernel.descriptors import resolve

    candidate = _platforms().get(_current_platform())
    return resolve(candidate.spec.factory)().memory_allocated() if candidate is not None else None


def get_backend() -> tuple[str, int, Callable[[], int]]:
    """``(device_type, device_count, memory_allocated)`` of the detected platform, as in
    Accelerate: ``("cpu", 1, <returns 0>)`` on a machine without an accelerator. The third item
    takes no argument and returns the bytes allocated on the current device (0 where the
    platform cannot tell)."""
    if _current_platform() == "cpu":
        return "cpu", 1, lambda: 0
    return _device_type(), max(_accelerator_count(), 1), lambda: memory_allocated_func() or 0


def are_the_same_tensors(tensor: Any) -> bool:
    """Whether every process holds the same ``tensor``."""
    from ..runtime.state import PartialState
    from ..services.cross_process import gather

    state = PartialState()
    tensor = tensor[None].clone().to(state.device)
    gathered = gather(tensor).cpu()
    return all(bool((row == gathered[0]).all()) for row in gathered)


@contextlib.contextmanager
def assert_exception(exception_class: type[BaseException], msg: str | None = None) -> Iterator[None]:
    """The block must raise ``exception_class`` (whose message contains ``msg``, when given)."""
    try:
        yield
    except exception_class as exc:
        if msg is not None and msg not in str(exc):
            raise AssertionError(f"{exception_class.__name__} raised, but {msg!r} is not in {str(exc)!r}") from exc
    else:
        raise AssertionError(f"{exception_class.__name__} was not raised")


def capture_call_output(func: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """What ``func(*args, **kwargs)`` prints."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        func(*args, **kwargs)
    return buffer.getvalue()


class TempDirTestCase(unittest.TestCase):
    """A test case with one temporary directory (``self.tmpdir``) for the class, emptied before
    each test unless ``clear_on_setup`` is false."""

    clear_on_setup = True

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmpdir = Path(tempfile.mkdtemp())

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmpdir, ignore_errors=True)

    def setUp(self) -> None:
        if self.clear_on_setup:
            for path in self.tmpdir.glob("**/*"):
                if path.is_file():
                    path.unlink()
                elif path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)


class AccelerateTestCase(unittest.TestCase):
    """Resets the process state after each test, so the next one starts fresh."""

    def tearDown(self) -> None:
        super().tearDown()
        from ..runtime.state import AcceleratorState, PartialState

        AcceleratorState._reset_state()
        PartialState._reset_state()


class MockingTestCase(unittest.TestCase):
    """Starts ``self.mocks`` (one patcher or a list) with :meth:`add_mocks`; each stops after the test."""

    def add_mocks(self, mocks: Any) -> None:
        self.mocks = mocks if isinstance(mocks, (tuple, list)) else [mocks]
        for mock in self.mocks:
            mock.start()
            self.addCleanup(mock.stop)
