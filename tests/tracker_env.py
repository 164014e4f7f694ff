"""A sealed environment for the real tracker libraries: offline modes, every file in tmp dirs.

Test modules import the ``tracker_env`` fixture from here. Nothing a tracker writes may reach
the network or the user's home: each library is put in its offline or local mode and its
home, cache and config folders point into the test's temporary directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Variables a developer's shell may carry that would send a run somewhere real.
CLEARED = (
    "WANDB_API_KEY", "WANDB_DIR", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_RUN_ID", "WANDB_BASE_URL",
    "MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID",
    "MLFLOW_RUN_ID", "COMET_API_KEY", "COMET_OFFLINE_DIRECTORY", "COMET_PROJECT_NAME", "COMET_WORKSPACE",
    "COMET_EXPERIMENT_KEY", "CLEARML_PROJECT", "CLEARML_TASK", "CLEARML_API_HOST", "CLEARML_API_ACCESS_KEY",
    "CLEARML_API_SECRET_KEY", "SWANLAB_API_KEY", "SWANLAB_LOG_DIR", "SWANLAB_LOGDIR", "SWANLAB_PROJECT",
    "TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL", "TRACKIO_DATASET_ID", "TRACKIO_BUCKET_ID",
)


_trackio_dir: Path | None = None


@pytest.fixture(scope="session")
def trackio_dir(tmp_path_factory) -> Path:
    """Trackio fixes its data directory when first imported, so there is one per process.

    (Each test module that imports this fixture gets its own session fixture; the module
    variable makes them share the directory.)
    """
    global _trackio_dir
    if _trackio_dir is None:
        _trackio_dir = tmp_path_factory.mktemp("trackio")
        os.environ["TRACKIO_DIR"] = str(_trackio_dir)
    utils = sys.modules.get("trackio.utils")
    return Path(utils.TRACKIO_DIR) if utils is not None else _trackio_dir


@pytest.fixture
def tracker_env(tmp_path, monkeypatch, trackio_dir) -> dict[str, Path]:
    """Offline modes and private folders for every tracker library; the cwd is a scratch dir.

    Returns the folders: ``logs`` (the run's logging directory), ``home``, ``cwd``,
    ``clearml`` (ClearML's cache, where its offline sessions go) and ``trackio``.
    """
    home = tmp_path / "home"
    cwd = tmp_path / "cwd"
    clearml_cache = tmp_path / "clearml-cache"
    for folder in (home, cwd, clearml_cache):
        folder.mkdir()
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    # ClearML reports from a thread instead of a subprocess: the same files, no 10 s shutdown.
    clearml_conf = tmp_path / "clearml.conf"
    clearml_conf.write_text("sdk { development { report_use_subprocess: false } }\n")
    settings = {
        "HOME": home,
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_STATE_HOME": home / ".local" / "state",
        "DO_NOT_TRACK": "1",
        # Weights & Biases
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_CACHE_DIR": home / ".cache" / "wandb",
        "WANDB_CONFIG_DIR": home / ".config" / "wandb",
        "WANDB_DATA_DIR": home / ".local" / "share" / "wandb",
        "WANDB_ARTIFACT_DIR": home / "wandb-artifacts",
        # MLflow (the tracker's default store is under the logging directory)
        "MLFLOW_DISABLE_TELEMETRY": "true",
        # Comet: an offline experiment, no API key
        "COMET_START_ONLINE": "false",
        "COMET_DISABLE_AUTO_LOGGING": "1",
        "COMET_AUTO_LOG_GIT_METADATA": "false",
        "COMET_AUTO_LOG_GIT_PATCH": "false",
        "COMET_AUTO_LOG_ENV_DETAILS": "false",
        "COMET_AUTO_LOG_CODE": "false",
        "COMET_DISPLAY_SUMMARY_LEVEL": "0",
        "COMET_ERROR_TRACKING_ENABLE": "false",
        # ClearML
        "CLEARML_OFFLINE_MODE": "1",
        "CLEARML_CACHE_DIR": clearml_cache,
        "CLEARML_CONFIG_FILE": clearml_conf,
        # DVC / DVCLive
        "DVC_NO_ANALYTICS": "1",
        # Hugging Face Hub (Trackio uses it)
        "HF_HOME": home / ".cache" / "huggingface",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        # SwanLab
        "SWANLAB_MODE": "offline",
        "SWANLAB_CONFIG_DIR": home / ".swanlab",
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.chdir(cwd)
    return {"logs": tmp_path / "logs", "home": home, "cwd": cwd, "clearml": clearml_cache, "trackio": trackio_dir}


def wandb_records(path: Path):
    """The protobuf records of a ``run-*.wandb`` file (a LevelDB-style log of 32 KiB blocks)."""
    import struct

    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    ident, _magic, _version = struct.unpack("<4sHB", data[:7])
    assert ident == b":W&B", f"{path} is not a W&B transaction log"
    block, position, pending = 32768, 7, b""
    while position + 7 <= len(data):
        room = block - position % block
        if room < 7:  # the rest of a block too small for a header is padding
            position += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position:position + 7])
        position += 7
        if position + length > len(data):  # a record still being written
            break
        chunk, position = data[position:position + length], position + length
        if kind == 0 and length == 0:
            break
        if kind == 1:  # a whole record
            pending = chunk
        elif kind in (2, 3):  # first / middle fragment
            pending = (pending if kind == 3 else b"") + chunk
            continue
        elif kind == 4:  # last fragment
            pending += chunk
        record = wandb_internal_pb2.Record()
        record.ParseFromString(pending)
        pending = b""
        yield record
