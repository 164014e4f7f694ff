"""``scripts/peer-suites`` refuses a comparison whose sides would not run what they claim to.

A 'here' interpreter without drivetrain's ``accelerate`` alias fails every peer test at import,
which the table would show as "passed on Accelerate only"; an Accelerate side that imports the
alias compares drivetrain with itself. Both are stopped before any test runs, with a line that
names the option to fix.
"""

from __future__ import annotations

import importlib.util
import stat
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HERE_PATH = [str(ROOT / "core"), str(ROOT / "plugins")]


def _runner():
    loader = SourceFileLoader("peer_suites_runner", str(ROOT / "scripts" / "peer-suites"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # its dataclasses look their module up there
    loader.exec_module(module)
    return module


def _alias_installed() -> bool:
    import accelerate

    return "+drivetrain" in getattr(accelerate, "__version__", "")


needs_alias = pytest.mark.skipif(not _alias_installed(), reason="the accelerate alias is not installed here")


def _python_without_site_packages(tmp_path: Path) -> Path:
    # The same interpreter without site-packages: neither the alias nor the real Accelerate.
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper


@needs_alias
def test_a_here_side_with_the_alias_is_accepted_and_named_by_its_version():
    runner = _runner()
    assert "+drivetrain" in runner.which_accelerate(Path(sys.executable), HERE_PATH)
    runner.check_sides(Path(sys.executable), HERE_PATH, None)


def test_a_here_side_without_the_alias_is_refused_naming_here_python(tmp_path):
    runner = _runner()
    with pytest.raises(SystemExit) as refused:
        runner.check_sides(_python_without_site_packages(tmp_path), HERE_PATH, None)
    message = str(refused.value)
    assert "--here-python" in message and "no accelerate" in message
    assert len(message.splitlines()) == 1


@needs_alias
def test_an_accelerate_side_that_imports_the_alias_is_refused_naming_accelerate_env():
    runner = _runner()
    with pytest.raises(SystemExit) as refused:
        runner.check_sides(None, HERE_PATH, Path(sys.executable))
    assert "--accelerate-env" in str(refused.value) and "+drivetrain" in str(refused.value)


def test_the_default_here_interpreter_is_a_project_venv_when_one_exists():
    runner = _runner()
    chosen = runner.project_python()
    venvs = [checkout / ".venv" / "bin" / "python" for checkout in (ROOT, *_main_checkouts())]
    if any(venv.exists() for venv in venvs):
        assert chosen in venvs and chosen.exists()
    else:
        assert chosen == Path(sys.executable)


def _main_checkouts() -> list[Path]:
    # A git worktree's main checkout holds the shared .git directory.
    git = ROOT / ".git"
    if git.is_file():
        gitdir = Path(git.read_text().split(":", 1)[1].strip())
        return [gitdir.parent.parent.parent]
    return []

