"""A pytest plugin that lifts a peer suite's hardware gates, for ``scripts/peer-suites --lift-gates``.

Accelerate's FSDP, DeepSpeed and TP tests are gated on accelerators (``require_non_cpu``,
``require_multi_device``, ...) although much of what they check is behaviour that runs on CPU
processes just as well. Loaded with ``-p peer_suites_gates`` (the runner puts this folder on
``PYTHONPATH`` and passes the settings in the environment), it replaces, before any test module
is collected:

* each decorator named in ``PEER_SUITES_LIFT_GATES`` (comma separated) by one that leaves the
  test as it is, in ``accelerate.test_utils.testing`` and in ``accelerate.test_utils`` (the two
  places test modules import them from);
* ``path_in_accelerate_package``, so that a script the tests launch from the package
  (``test_utils/scripts/...``) and the installed package lacks comes from the checked-out
  tree's ``PEER_SUITES_PACKAGE_FILES`` (Accelerate's ``src/accelerate``), fetched at run time;
* the device-count helpers (``device_count``, ``get_backend``, ``DEFAULT_LAUNCH_COMMAND``) by
  ``PEER_SUITES_DEVICE_COUNT`` processes on CPU, so that a test that sizes its
  ``accelerate launch --num_processes`` from them launches that many CPU processes.

It patches the same names on both sides (drivetrain's ``accelerate`` alias and the real
Accelerate), so the two runs stay comparable. It is never part of the project's own test run.
"""

from __future__ import annotations

import os
from typing import Any

GATES_VARIABLE = "PEER_SUITES_LIFT_GATES"
DEVICE_COUNT_VARIABLE = "PEER_SUITES_DEVICE_COUNT"
PACKAGE_FILES_VARIABLE = "PEER_SUITES_PACKAGE_FILES"


def _leave_as_is(test_case: Any = None, *args: Any, **kwargs: Any) -> Any:
    """A lifted gate: the test runs. Serves both ``@gate`` and ``@gate(...)`` spellings."""
    if test_case is None or args or kwargs or not (callable(test_case) or isinstance(test_case, type)):
        return lambda case: case
    return test_case


def lift(gates: list[str], device_count: int) -> list[str]:
    """Patch the named gates and the device count; the names patched (a name neither module
    knows is reported, not invented)."""
    import accelerate.test_utils as package
    import accelerate.test_utils.testing as testing

    patched = []
    for gate in gates:
        known = False
        for module in (testing, package):
            try:
                getattr(module, gate)
            except AttributeError:
                continue
            setattr(module, gate, _leave_as_is)
            known = True
        if known:
            patched.append(gate)
    if device_count > 0:
        for module in (testing, package):
            module.device_count = device_count
            module.torch_device = "cpu"
            module.get_backend = lambda: ("cpu", device_count, lambda *_args: 0)
        testing.DEFAULT_LAUNCH_COMMAND = testing.get_launch_command(num_processes=device_count,
                                                                    monitor_interval=0.1)
        package.DEFAULT_LAUNCH_COMMAND = testing.DEFAULT_LAUNCH_COMMAND
    return patched


def find_package_files(package_files: str) -> None:
    """``path_in_accelerate_package`` falls back on ``package_files`` for what is not installed."""
    from pathlib import Path

    import accelerate.test_utils as package
    import accelerate.test_utils.testing as testing

    installed = testing.path_in_accelerate_package

    def path_in_accelerate_package(*components: str) -> Path:
        path = Path(installed(*components))
        fetched = Path(package_files).joinpath(*components)
        return fetched if not path.exists() and fetched.exists() else path

    for module in (testing, package):
        module.path_in_accelerate_package = path_in_accelerate_package


def _settings() -> tuple[list[str], int]:
    gates = [name.strip() for name in os.environ.get(GATES_VARIABLE, "").split(",") if name.strip()]
    return gates, int(os.environ.get(DEVICE_COUNT_VARIABLE, "0") or 0)


# Patched when pytest loads the plugin (``-p``): before the rootdir's conftest.py files and every
# test module are imported, so their ``from accelerate.test_utils.testing import ...`` see the
# lifted names and their decorators apply them.
_GATES, _DEVICE_COUNT = _settings()
_PATCHED = lift(_GATES, _DEVICE_COUNT) if (_GATES or _DEVICE_COUNT) else []
if os.environ.get(PACKAGE_FILES_VARIABLE):
    find_package_files(os.environ[PACKAGE_FILES_VARIABLE])


def pytest_report_header(config: Any) -> str:
    unknown = sorted(set(_GATES) - set(_PATCHED))
    return (f"peer-suites: gates lifted: {', '.join(_PATCHED) or 'none'}"
            + (f" (unknown here: {', '.join(unknown)})" if unknown else "")
            + f"; device count: {_DEVICE_COUNT or 'as detected'}")
