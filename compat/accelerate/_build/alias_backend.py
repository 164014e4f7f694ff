"""setuptools' build backend, refusing to build into an interpreter that has a real Accelerate.

pip builds the alias with the interpreter it installs into; that interpreter's site-packages
are looked at directly (an isolated build hides them from ``sys.path``). Installing the alias
over a real Accelerate would silently uninstall it, since both are named ``accelerate``.

A wheel runs no code when pip installs it, so a wheel carried to another environment could
replace a real Accelerate there unchecked. Each wheel therefore records the site directories
this build checked (``drivetrain_accelerate_alias/checked_for.json``); the alias refuses to run
from any other place, naming the source install that checks (see ``check_installed_where_built``).
"""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import site
import sysconfig
import zipfile

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the hooks this backend does not change)

_LABEL = "+drivetrain"


def _real_accelerate() -> str | None:
    for place in checked_site_directories():
        for info in glob.glob(os.path.join(place, "accelerate-*.dist-info")):
            version = os.path.basename(info)[len("accelerate-"):-len(".dist-info")]
            if not version.endswith(_LABEL) and "drivetrain" not in version:
                return f"accelerate {version} in {os.path.dirname(info)}"
    return None


def _refuse_over_real_accelerate() -> None:
    found = _real_accelerate()
    if found is not None:
        raise SystemExit(f"error: the drivetrain `accelerate` alias will not install over a real Hugging Face "
                         f"Accelerate ({found}): run `pip uninstall accelerate` first")


CHECKED_FOR = "drivetrain_accelerate_alias/checked_for.json"


def checked_site_directories() -> list[str]:
    """The directories pip may install into from this interpreter, all checked above."""
    places = [sysconfig.get_paths()[scheme] for scheme in ("purelib", "platlib")]
    if site.ENABLE_USER_SITE:
        places.append(site.getusersitepackages())
    return sorted({os.path.realpath(place) for place in places})


PORTABLE = "portable"  # ``pip wheel -C portable=1``: the builder vouches for every place it is installed


def _record_checked_places(wheel: str, portable: bool) -> None:
    """Add ``CHECKED_FOR`` to the wheel, with its line in the wheel's RECORD."""
    places = "any" if portable else checked_site_directories()
    content = json.dumps({"site_directories": places}, indent=1).encode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
    rewritten = wheel + ".part"
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                data += f"{CHECKED_FOR},sha256={digest},{len(content)}\n".encode()
                target.writestr(CHECKED_FOR, content)
            target.writestr(item, data)
    os.replace(rewritten, wheel)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel for this interpreter's environment; with ``-C portable=1`` a wheel for any, whose
    installer takes on the check (``pip uninstall accelerate`` first, as ``scripts/test-gpu`` does)."""
    _refuse_over_real_accelerate()
    settings = dict(config_settings or {})
    portable = str(settings.pop(PORTABLE, "")).strip().lower() in ("1", "true", "yes")
    name = _setuptools.build_wheel(wheel_directory, settings or None, metadata_directory)
    _record_checked_places(os.path.join(wheel_directory, name), portable)
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _refuse_over_real_accelerate()
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
