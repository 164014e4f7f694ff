"""Shared fixtures: a clean environment for every test, real plugin distributions installed with
pip, and the ``drivetrain`` command run in this process or in a fresh one."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from deepspeed_ops import EXTENSIONS

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_DISTS = ROOT / "tests" / "plugin_dists"
TEMPLATE = ROOT / "examples" / "plugin_template"
HOSTILE = "drivetrain-hostile-"  # distributions that must not be loaded without a short time limit

# Variables that choose a backend, an option or a process layout: a developer's shell, or a
# launcher the suite runs under, must not decide what a test sees.
RUN_VARIABLE_PREFIXES = ("DRIVETRAIN_", "ACCELERATE_", "FSDP_", "MEGATRON_LM_", "PARALLELISM_CONFIG_",
                         "SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_")
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                      "MASTER_PORT", "TORCHELASTIC_RUN_ID", "KUBERNETES_SERVICE_HOST")


def is_run_variable(key: str) -> bool:
    return key.startswith(RUN_VARIABLE_PREFIXES) or key in LAUNCHER_VARIABLES


def clean_environ(**extra: str) -> dict[str, str]:
    """This process's environment without run variables, plus ``extra``: for a child process."""
    env = {key: value for key, value in os.environ.items() if not is_run_variable(key)}
    env.update(extra)
    return env


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Every test starts without run variables; returns ``monkeypatch`` to set the ones it wants."""
    for key in [key for key in os.environ if is_run_variable(key)]:
        monkeypatch.delenv(key)
    return monkeypatch


def _pip_install_target(target: Path, *sources: Path) -> None:
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
        "--disable-pip-version-check", "--target", str(target), *map(str, sources),
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pip install failed:\n{result.stdout}\n{result.stderr}")


def _lay_out_plugin_dists(target: Path, *sources: Path) -> None:
    """The test plugin distributions of ``sources`` in ``target`` as an installer leaves them:
    each package, and a ``.dist-info`` with the name, version and entry points of its
    ``pyproject.toml``. Discovery reads nothing else, and pip built a wheel of each (20 s for
    the two sets); the plugin template, whose packaging is itself under test, goes through pip."""
    import shutil
    import tomllib

    for source in sources:
        pyproject = tomllib.loads((source / "pyproject.toml").read_text())
        project, packages = pyproject["project"], pyproject["tool"]["setuptools"]["packages"]
        for package in packages:
            shutil.copytree(source / package, target / package, ignore=shutil.ignore_patterns("__pycache__"))
        info = target / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\n"
                                       f"Version: {project['version']}\n")
        (info / "entry_points.txt").write_text("".join(
            f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in points.items()) + "\n"
            for group, points in project.get("entry-points", {}).items()))
        (info / "top_level.txt").write_text("".join(f"{package}\n" for package in packages))


@pytest.fixture(scope="session")
def template_site(tmp_path_factory) -> Path:
    """A directory where pip installed the third-party plugin template, as a user would."""
    target = tmp_path_factory.mktemp("template-site")
    _pip_install_target(target, TEMPLATE)
    return target


@pytest.fixture(scope="session")
def broken_site(tmp_path_factory) -> Path:
    """A directory holding the deliberately broken plugin distributions of tests/plugin_dists/
    (each fails in a way discovery reports at once)."""
    target = tmp_path_factory.mktemp("broken-site")
    _lay_out_plugin_dists(target, *sorted(d for d in PLUGIN_DISTS.iterdir() if not d.name.startswith(HOSTILE)))
    return target


@pytest.fixture(scope="session")
def hostile_site(tmp_path_factory) -> Path:
    """A directory holding the hostile plugin distributions of tests/plugin_dists/:
    they hang, exit, interrupt, print to stdout or raise in run and launch hooks. Set
    DRIVETRAIN_PLUGIN_TIMEOUT low where they are loaded (one sleeps at import)."""
    target = tmp_path_factory.mktemp("hostile-site")
    _lay_out_plugin_dists(target, *sorted(d for d in PLUGIN_DISTS.iterdir() if d.name.startswith(HOSTILE)))
    return target


def run_cli(*args: str, sites: tuple[Path, ...] = (), env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python -m drivetrain ARGS`` in a fresh interpreter with extra site directories."""
    full_env = clean_environ()
    if sites:
        full_env["PYTHONPATH"] = os.pathsep.join([*map(str, sites), full_env.get("PYTHONPATH", "")])
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "drivetrain", *args], capture_output=True,
                          text=True, env=full_env, timeout=timeout)


@pytest.fixture
def cli(monkeypatch, capsys):
    """``drivetrain ARGS`` in this process, as ``run_cli`` runs it in a fresh one (same arguments,
    same result): the plugins are discovered again with the extra site directories and variables
    of this call only, and plugin warnings go to stderr as the interpreter prints them. Use
    ``run_cli`` only where the fresh interpreter is the point."""
    import importlib
    import io
    import warnings

    from drivetrain import plugin_manager
    from drivetrain.cli.main import main
    from drivetrain.kernel import installed

    def run(*argv: str, sites: tuple[Path, ...] = (), env: dict[str, str] | None = None,
            input: str | None = None) -> subprocess.CompletedProcess:
        capsys.readouterr()
        with monkeypatch.context() as scoped, warnings.catch_warnings(record=True) as caught:
            for site in sites:
                scoped.syspath_prepend(str(site))
            importlib.invalidate_caches()
            for key, value in (env or {}).items():
                scoped.setenv(key, value)
            scoped.setattr(plugin_manager, "_default_manager", None)
            scoped.setattr(installed, "_versions", {})  # the sites of this call may install more
            scoped.setattr(plugin_manager, "_warned", set())
            scoped.setattr(sys, "stdin", io.StringIO(input or ""))
            warnings.simplefilter("default")
            try:
                code = main(list(argv))
            except SystemExit as stop:  # argparse: --version, --help, usage errors
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        out, err = capsys.readouterr()
        err += "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in caught)
        return subprocess.CompletedProcess(["drivetrain", *argv], code, out, err)

    return run


@pytest.fixture
def with_sites(monkeypatch):
    """Make distributions installed in extra directories visible to this process."""
    import importlib

    def add(*sites: Path) -> None:
        for site in sites:
            monkeypatch.syspath_prepend(str(site))
        importlib.invalidate_caches()

    return add


@pytest.fixture
def fresh_state(clean_env):
    """A clean process state (one process, CPU) before and after the test."""
    from drivetrain.state import AcceleratorState, GradientState, PartialState

    def reset():
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()

    reset()
    yield
    reset()


@pytest.fixture
def private_group():
    """A one-process group that a test creates (FSDP in one process) is destroyed after it."""
    import torch.distributed as dist

    existed = dist.is_initialized()
    yield
    if dist.is_initialized() and not existed:
        dist.destroy_process_group()


def _group_initialized() -> bool:
    if "torch.distributed" not in sys.modules:  # nothing joined a group: no need to import torch
        return False
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


@pytest.fixture(autouse=True)
def no_group_left_behind():
    """A test that joins a process group without ``private_group`` fails: on a GPU machine the
    NCCL group it leaves keeps the test process from exiting at the end of the run."""
    existed = _group_initialized()
    yield
    if _group_initialized() and not existed:
        import torch.distributed as dist

        dist.destroy_process_group()
        pytest.fail("the test left a process group behind; give it the private_group fixture")


# ------------------------------------------------------------------ DeepSpeed's compiled ops

# Every process the tests start, and the tests' own, find (or make) the ops there: a launched
# DeepSpeed job that loads its shared-memory collective without asking for deepspeed_ops
# would otherwise compile it again in torch's default directory.
os.environ["TORCH_EXTENSIONS_DIR"] = EXTENSIONS


class _OpsBuild:
    """The build of DeepSpeed's CPU ops into :data:`EXTENSIONS` (``deepspeed_ops.py``), in a
    child process.

    Started in the background when the session collects a test that needs the ops: at a lower
    priority, it takes the CPU time the tests that run before them leave (those tests run last,
    see ``pytest_collection_modifyitems``) instead of stalling the session for minutes when the
    first of them starts. Already built, it only loads them (seconds)."""

    process: subprocess.Popen | None = None
    output = None  # a temporary file: a pipe nobody reads while the build runs could fill and stall it
    started = 0.0

    @classmethod
    def start(cls, background: bool) -> None:
        if cls.process is not None:
            return
        os.makedirs(EXTENSIONS, exist_ok=True)  # stop() takes the build's flock there
        env = dict(os.environ, TORCH_EXTENSIONS_DIR=EXTENSIONS, DS_ACCELERATOR="cpu")
        cls.started = time.monotonic()
        cls.output = tempfile.TemporaryFile("w+")
        cls.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("deepspeed_ops.py"))], env=env,
            stdout=cls.output, stderr=subprocess.STDOUT, text=True, start_new_session=True,
            preexec_fn=(lambda: os.nice(10)) if background else None)

    @classmethod
    def wait(cls) -> None:
        cls.start(background=False)
        cls.process.wait(timeout=1500)
        cls.output.seek(0)
        assert cls.process.returncode == 0, cls.output.read()[-3000:]
        print(f"DeepSpeed ops ready {time.monotonic() - cls.started:.0f}s after the build started ({EXTENSIONS})")

    @classmethod
    def stop(cls) -> None:
        """An interrupted session: the build ends with it, and its torch lock goes with it (the
        flock, taken after the builder is gone, shows that no other build holds one). SIGTERM
        first, to the builder's process group: ninja ends the compilers it started, each in a
        group of its own, only when it can handle the signal."""
        if cls.process is None or cls.process.poll() is not None:
            return
        os.killpg(cls.process.pid, signal.SIGTERM)
        try:
            cls.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(cls.process.pid, signal.SIGKILL)
            cls.process.wait()
        with open(os.path.join(EXTENSIONS, ".build.flock"), "w") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            for lock in Path(EXTENSIONS).glob("*/lock"):
                lock.unlink(missing_ok=True)


def _runs_deepspeed(item: pytest.Item) -> bool:
    return "optional_deepspeed_ops" in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what will not run
def pytest_collection_modifyitems(config, items):
    """The tests that need DeepSpeed's ops run last, and the ops are built meanwhile."""
    if config.option.collectonly or importlib.util.find_spec("deepspeed") is None:
        return
    late = [item for item in items if _runs_deepspeed(item)]
    if late:
        items[:] = [item for item in items if not _runs_deepspeed(item)] + late
        _OpsBuild.start(background=True)


def pytest_unconfigure(config):
    _OpsBuild.stop()


@pytest.fixture(scope="session")
def optional_deepspeed_ops() -> dict[str, str] | None:
    """DeepSpeed's CPU ops (a shared-memory collective, CPU Adam), built once into
    :data:`EXTENSIONS` under a lock before any test loads them (each directory is a build of
    its own, a minute or two on 2 cores); None without DeepSpeed. Every process of the session
    already looks there (``TORCH_EXTENSIONS_DIR`` above); the variables returned say so in a
    child's own environment. Every test that runs DeepSpeed asks for it, or for
    ``deepspeed_ops``: it orders the session (see above)."""
    if importlib.util.find_spec("deepspeed") is None:
        return None
    _OpsBuild.wait()
    return {"TORCH_EXTENSIONS_DIR": EXTENSIONS}


@pytest.fixture(scope="session")
def deepspeed_ops(optional_deepspeed_ops) -> dict[str, str]:
    """:func:`optional_deepspeed_ops`, the test skipped without DeepSpeed."""
    if optional_deepspeed_ops is None:
        pytest.skip("deepspeed is not installed (pip install -c constraints.txt -e '.[deepspeed]')")
    return optional_deepspeed_ops
