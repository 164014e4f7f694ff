"""setuptools' build backend, refusing to build into an interpreter that has a real Accelerate.

pip builds the alias with the interpreter it installs into; that interpreter's site-packages
are looked at directly (an isolated build hides them from ``sys.path``). Installing the alias
over a real Accelerate would silently uninstall it, since both are named ``accelerate``.
"""

from __future__ import annotations

import glob
import os
import sysconfig

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the hooks this backend does not change)

_LABEL = "+drivetrain"


def _real_accelerate() -> str | None:
    for scheme in ("purelib", "platlib"):
        for info in glob.glob(os.path.join(sysconfig.get_paths()[scheme], "accelerate-*.dist-info")):
            version = os.path.basename(info)[len("accelerate-"):-len(".dist-info")]
            if not version.endswith(_LABEL) and "drivetrain" not in version:
                return f"accelerate {version} in {os.path.dirname(info)}"
    return None


def _refuse_over_real_accelerate() -> None:
    found = _real_accelerate()
    if found is not None:
        raise SystemExit(f"error: the drivetrain `accelerate` alias will not install over a real Hugging Face "
                         f"Accelerate ({found}): run `pip uninstall accelerate` first")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _refuse_over_real_accelerate()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _refuse_over_real_accelerate()
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
