"""A throwaway virtual environment with the `accelerate` alias installed by pip, as a user would.

It is layered over the interpreter running the suite (its site-packages, editable installs
included, are added by a `.pth` file), so torch, transformers and drivetrain are not installed
twice; only the alias distribution is installed into it.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

ALIAS = Path(__file__).resolve().parent.parent / "compat" / "accelerate"


@dataclass(frozen=True)
class AliasEnv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def site_packages(self) -> Path:
        out = subprocess.run([str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True)
        return Path(out.stdout.strip())

    def pip(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.python), "-m", "pip", "--disable-pip-version-check", *args],
                              capture_output=True, text=True)

    def install_alias(self) -> subprocess.CompletedProcess:
        return self.pip("install", "--quiet", "--no-deps", "--no-build-isolation", str(ALIAS))


def make_env(root: Path) -> AliasEnv:
    """A virtual environment at ``root`` that sees this interpreter's packages, without the alias yet."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    env = AliasEnv(root)
    # addsitedir, not a bare path: the base's own .pth files (editable installs) must run too
    bases = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    (env.site_packages / "_base_environment.pth").write_text(
        "".join(f"import site; site.addsitedir({base!r})\n" for base in bases))
    return env


def real_accelerate_env(root: Path, version: str = "1.15.0") -> AliasEnv:
    """The environment at ``root`` with Hugging Face Accelerate ``version`` installed in it
    (made when missing). ``--ignore-installed``: the base environment's alias is
    ``1.15.0+drivetrain``, which ``==1.15.0`` accepts, so pip would otherwise install nothing."""
    env = AliasEnv(root)
    if env.python.exists():
        shown = env.pip("show", "accelerate")
        if shown.returncode == 0 and f"Location: {env.site_packages}" in shown.stdout:
            return env
    env = make_env(root) if not env.python.exists() else env
    result = env.pip("install", "--quiet", "--no-deps", "--ignore-installed", f"accelerate=={version}")
    if result.returncode != 0:
        raise RuntimeError(f"installing accelerate {version} failed: {result.stderr.strip()}")
    return env


def make_alias_env(root: Path) -> AliasEnv:
    env = make_env(root)
    result = env.install_alias()
    if result.returncode != 0:
        raise RuntimeError(f"installing the accelerate alias failed:\n{result.stdout}\n{result.stderr}")
    return env


def fake_real_accelerate(directory: Path, version: str = "1.15.0") -> None:
    """The metadata of a Hugging Face Accelerate distribution in ``directory`` (enough for importlib.metadata)."""
    info = directory / f"accelerate-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: accelerate\nVersion: {version}\n")
