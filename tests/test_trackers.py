"""Every tracker plugin against its real library, offline, read back with that library's tools.

Each test drives one tracker through the same facade the Accelerator uses (``Trackers``) and
then reads what was written: TensorBoard event files with TensorBoard's reader, MLflow runs
with ``MlflowClient``, the W&B transaction log with W&B's protobuf records, and so on. A test
is skipped, with the reason, only when its library is not installed
(``pip install 'drivetrain[NAME]'``).
"""

from __future__ import annotations

import json
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from tracker_env import trackio_dir, tracker_env, wandb_records  # noqa: F401  (fixtures)

from drivetrain.plugin_manager import PluginManager
from drivetrain.tracking import Trackers

# The libraries' own deprecation warnings are not this project's to fix.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")

CONFIG = {"lr": 0.1, "epochs": 3, "optim": {"name": "adam"}}
CHECKPOINT = "checkpoints/checkpoint_0"


def library(module: str, extra: str):
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install 'drivetrain[{extra}]')")


def drive(name: str, logs: Path, init_kwargs: dict | None = None, project: str = "demo", extra=None) -> Trackers:
    """The life of a run: init with a config, two logged steps, extras, a checkpoint, the end."""
    trackers = Trackers(name, logging_dir=logs, manager=PluginManager(env={}).load())
    trackers.init_trackers(project, config=CONFIG, init_kwargs={name: init_kwargs or {}})
    trackers.log({"loss": 1.5, "acc": np.float32(0.25)}, step=1)
    trackers.log({"loss": 1.0}, step=2)
    if extra is not None:
        extra(trackers.get_tracker(name))
    trackers.on_checkpoint("save", str(logs / CHECKPOINT))
    return trackers


def test_tensorboard_event_files_read_back_with_tensorboard(tracker_env):
    library("tensorboard", "tensorboard")
    import torch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logs = tracker_env["logs"]
    trackers = Trackers("tensorboard", logging_dir=logs, manager=PluginManager(env={}).load())
    trackers.init_trackers("demo", config=CONFIG)
    trackers.log({"loss": torch.tensor(1.5), "note": "warm-up", "pair": {"a": 1.0, "b": 2.0}}, step=1)
    trackers.log({"loss": 1.0}, step=2)
    trackers.get_tracker("tensorboard").log_images({"samples": np.zeros((2, 3, 4, 4), dtype=np.uint8)}, step=2)
    writer = trackers.get_tracker("tensorboard", unwrap=True)
    trackers.end_training()

    run_dir = logs / "demo"
    assert writer.log_dir == str(run_dir)
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(1, 1.5), (2, 1.0)]
    # add_images tiles the batch of two 4x4 images into one grid image.
    assert [(i.step, i.width, i.height) for i in events.Images("samples")] == [(2, 8, 4)]
    assert "note/text_summary" in events.Tags()["tensors"]
    assert yaml.safe_load((run_dir / "hparams.yml").read_text()) == {"lr": 0.1, "epochs": 3, "optim/name": "adam"}
    # add_scalars writes each series to a sub-run of its own.
    pair = EventAccumulator(str(run_dir / "pair_a"))
    pair.Reload()
    assert [e.value for e in pair.Scalars("pair")] == [1.0]
    assert not any(tracker_env["cwd"].iterdir())


def test_wandb_offline_run_is_written_under_the_logging_dir(tracker_env):
    library("wandb", "wandb")
    logs = tracker_env["logs"]

    def extra(tracker):
        tracker.log_images({"samples": [np.zeros((4, 4, 3), dtype=np.uint8)]}, step=2)
        tracker.log_table("preds", columns=["x", "y"], data=[[1, 2], [3, 4]], step=2)

    trackers = drive("wandb", logs, init_kwargs={"name": "first"}, extra=extra)
    run = trackers.get_tracker("wandb", unwrap=True)
    assert run.settings.mode == "offline" and run.name == "first" and run.project == "demo"
    trackers.end_training()

    [run_dir] = (logs / "wandb").glob("offline-run-*")
    [log_file] = run_dir.glob("run-*.wandb")
    history, config, summary = [], {}, {}
    for record in _complete_wandb_log(log_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item})
        elif kind in ("config", "run"):
            updates = record.config.update if kind == "config" else record.run.config.update
            config.update({u.key: json.loads(u.value_json) for u in updates})
        elif kind == "summary":
            summary.update({(u.key or "/".join(u.nested_key)): json.loads(u.value_json) for u in record.summary.update})
    assert [(h["_step"], h["loss"]) for h in history if "loss" in h] == [(1, 1.5), (2, 1.0)]
    assert history[0]["acc"] == 0.25
    assert config["lr"] == 0.1 and config["optim"] == {"name": "adam"}
    assert summary["checkpoint/last_save"] == str(logs / CHECKPOINT)
    assert list((run_dir / "files" / "media" / "images").glob("samples_2_*.png"))
    assert list((run_dir / "files" / "media" / "table").glob("preds_2_*.table.json"))
    assert not any(tracker_env["cwd"].iterdir())


def _complete_wandb_log(path: Path, timeout: float = 30.0) -> list:
    """The records of a W&B run log once its ``exit`` record is there: W&B's service process
    may still be writing the tail of the file for a moment after ``run.finish()`` returns."""
    deadline = time.monotonic() + timeout
    while True:
        records = list(wandb_records(path))
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def test_mlflow_run_in_a_local_sqlite_store_read_back_with_the_client(tracker_env):
    library("mlflow", "mlflow")
    from mlflow.tracking import MlflowClient

    logs = tracker_env["logs"]

    def extra(tracker):
        tracker.log_table("preds", columns=["x", "y"], data=[[1, 2], [3, 4]])
        tracker.log_images({"samples": np.zeros((4, 4, 3), dtype=np.uint8)}, step=2)

    trackers = drive("mlflow", logs, init_kwargs={"run_name": "first", "tags": {"team": "a"}}, extra=extra)
    run_id = trackers.get_tracker("mlflow", unwrap=True).info.run_id
    trackers.end_training()

    client = MlflowClient(tracking_uri=f"sqlite:///{logs / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("demo")
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == run_id and run.info.status == "FINISHED" and run.info.run_name == "first"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")] == [(1, 1.5), (2, 1.0)]
    assert run.data.metrics["acc"] == 0.25
    assert run.data.params == {"lr": "0.1", "epochs": "3", "optim/name": "adam"}
    assert run.data.tags["team"] == "a"
    assert run.data.tags["drivetrain.checkpoint.last_save"] == str(logs / CHECKPOINT)
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert "preds.json" in artifacts and "images" in artifacts
    assert experiment.artifact_location.startswith((logs / "mlartifacts").as_uri())
    table = json.loads(Path(client.download_artifacts(run_id, "preds.json", str(tracker_env["home"]))).read_text())
    assert table["columns"] == ["x", "y"] and table["data"] == [[1, 2], [3, 4]]
    assert not any(tracker_env["cwd"].iterdir())


def test_comet_offline_experiment_archive(tracker_env):
    library("comet_ml", "comet")
    logs = tracker_env["logs"]

    def extra(tracker):
        tracker.log({"phase": "train", "lrs": {"g0": 0.5}}, step=2)
        tracker.log_table("preds", columns=["x", "y"], data=[[1, 2]])

    trackers = drive("comet_ml", logs, extra=extra)
    experiment = trackers.get_tracker("comet_ml", unwrap=True)
    assert type(experiment).__name__ == "OfflineExperiment"
    trackers.end_training()

    [archive] = (logs / "comet").glob("*.zip")
    with zipfile.ZipFile(archive) as zipped:
        messages = [json.loads(line) for line in zipped.read("messages.json").decode().splitlines()]
        assets = {m["payload"]["additional_params"]["fileName"]: zipped.read(m["payload"]["file_path"]).decode()
                  for m in messages if m["type"] == "file_upload"}
    metrics = [(m["metricName"], m["step"], m["metricValue"])
               for m in (m["payload"]["metric"] for m in messages if m["type"] == "metric_msg")]
    params = {m["payload"]["param"]["paramName"]: m["payload"]["param"]["paramValue"]
              for m in messages if m["type"] == "parameter_msg" and m["payload"]["param"]["source"] == "manual"}
    others = {m["payload"]["key"]: m["payload"]["value"] for m in messages if m["type"] == "log_other"}
    assert ("loss", 1, 1.5) in metrics and ("loss", 2, 1.0) in metrics and ("acc", 1, 0.25) in metrics
    assert ("lrs_g0", 2, 0.5) in metrics
    assert params["lr"] == 0.1 and params["epochs"] == 3
    assert others["phase"] == "train" and others["checkpoint_last_save"] == str(logs / CHECKPOINT)
    assert assets["preds.csv"].splitlines() == ["x,y", "1,2"]


def test_aim_run_in_a_local_repository(tracker_env):
    library("aim", "aim")
    import aim
    from aim.storage.context import Context
    from aim.sdk.index_manager import RepoIndexManager

    logs = tracker_env["logs"]

    def extra(tracker):
        tracker.log_images({"samples": (np.zeros((4, 4, 3), dtype=np.uint8), "blank")}, step=2)

    quiet = {"system_tracking_interval": None, "log_system_params": False, "capture_terminal_logs": False}
    trackers = drive("aim", logs, init_kwargs=quiet, extra=extra)
    run_hash = trackers.get_tracker("aim", unwrap=True).hash
    trackers.end_training()

    repo = aim.Repo.from_path(str(logs))
    RepoIndexManager.get_index_manager(repo).index(run_hash)  # what `aim up` does in the background
    run = repo.get_run(run_hash)
    assert run.name == "demo" and run["hparams"] == CONFIG
    assert run["checkpoint"] == {"last_save": str(logs / CHECKPOINT)}
    series = {}
    for metric in run.metrics():
        steps, (values, *_) = metric.data.items_list()
        series[metric.name] = list(zip(steps, values))
    assert series["loss"] == [(1, 1.5), (2, 1.0)] and series["acc"] == [(1, 0.25)]
    steps, ([image], *_) = run.get_image_sequence("samples", Context({})).data.items_list()
    assert steps == [2] and image.caption == "blank"
    assert (logs / ".aim").is_dir()


def test_clearml_offline_session(tracker_env):
    library("clearml", "clearml")
    logs = tracker_env["logs"]

    def extra(tracker):
        tracker.log({"eval/loss": 0.5}, step=3)
        tracker.log_table("preds", columns=["x", "y"], data=[[1, 2]], step=3)

    trackers = drive("clearml", logs, init_kwargs={"auto_connect_frameworks": False, "auto_resource_monitoring": False,
                                                   "auto_connect_streams": False, "auto_connect_arg_parser": False},
                     extra=extra)
    task = trackers.get_tracker("clearml", unwrap=True)
    folder = Path(task.get_offline_mode_folder())
    trackers.end_training()

    assert folder.parent == tracker_env["clearml"] / "offline" and folder.with_suffix(".zip").is_file()
    events = [e for line in (folder / "metrics.jsonl").read_text().splitlines() for e in json.loads(line)]
    scalars = [(e["metric"], e["variant"], e["iter"], e["value"])
               for e in events if e["type"] == "training_stats_scalar"]
    assert ("loss", "loss", 1, 1.5) in scalars and ("loss", "loss", 2, 1.0) in scalars
    assert ("acc", "acc", 1, 0.25) in scalars and ("eval", "loss", 3, 0.5) in scalars
    assert any(e["type"] == "plot" and e["metric"] == "preds" for e in events)
    task_json = json.loads((folder / "task.json").read_text())
    assert task_json["name"] == "demo" and "General" in json.dumps(task_json.get("configuration", {}))
    log_lines = (folder / "log.jsonl").read_text()
    assert f"checkpoint save: {logs / CHECKPOINT}" in log_lines


def test_dvclive_files_stay_in_the_logging_dir(tracker_env):
    library("dvclive", "dvclive")
    logs = tracker_env["logs"]

    def extra(tracker):
        tracker.log_images({"samples": np.zeros((4, 4, 3), dtype=np.uint8)}, step=2)

    drive("dvclive", logs, extra=extra).end_training()

    live_dir = logs / "dvclive"
    assert json.loads((live_dir / "metrics.json").read_text()) == {"loss": 1.0, "acc": 0.25, "step": 2}
    assert (live_dir / "plots" / "metrics" / "loss.tsv").read_text().split() == ["step", "loss", "1", "1.5", "2", "1.0"]
    assert yaml.safe_load((live_dir / "params.yaml").read_text()) == CONFIG
    assert (live_dir / "plots" / "images" / "samples_2.png").is_file()
    assert (live_dir / "dvc.yaml").is_file()
    assert not any(tracker_env["cwd"].iterdir()), "DVCLive wrote into the current directory"


def test_trackio_local_database(tracker_env, request, capsys):
    library("trackio", "trackio")
    import trackio
    from trackio.sqlite_storage import SQLiteStorage

    project = f"demo-{request.node.name[-8:]}-{tracker_env['home'].parent.name}"

    def extra(tracker):
        tracker.log_table("preds", columns=["x", "y"], data=[[1, 2]], step=3)

    trackers = drive("trackio", tracker_env["logs"], init_kwargs={"name": "first", "auto_log_cpu": False},
                     project=project, extra=extra)
    trackers.end_training()
    trackio._cleanup_current_run()  # what trackio runs at exit: the run is finished once only
    assert capsys.readouterr().out.count("Run finished") == 1

    logs = SQLiteStorage.get_logs(project, "first")
    assert [(r["step"], r["loss"]) for r in logs if "loss" in r] == [(1, 1.5), (2, 1.0)]
    assert logs[0]["acc"] == 0.25
    assert any("preds" in r for r in logs)
    config = SQLiteStorage.get_run_config(project, "first")
    assert config["lr"] == 0.1 and config["optim"] == {"name": "adam"}
    assert list(tracker_env["trackio"].glob(f"{project}*"))


def test_swanlab_offline_run(tracker_env):
    library("swanlab", "swanlab")
    logs = tracker_env["logs"]

    def extra(tracker):
        tracker.log_images({"samples": np.zeros((4, 4, 3), dtype=np.uint8)}, step=2)

    trackers = drive("swanlab", logs, init_kwargs={"name": "first"}, extra=extra)
    trackers.end_training()

    [run_dir] = (logs / "swanlog").glob("run-*")
    config = yaml.safe_load((run_dir / "files" / "config.yaml").read_text())
    assert config["lr"]["value"] == 0.1 and config["epochs"]["value"] == 3
    assert list((run_dir / "media").rglob("*.png"))
    [log_file] = run_dir.glob("run-*.swanlab")
    scalars = _swanlab_scalars(log_file)
    if scalars is not None:  # SwanLab's reader is internal; the files above are the contract
        assert scalars["loss"] == [(1, 1.5), (2, 1.0)] and scalars["acc"] == [(1, 0.25)]
    assert not any(tracker_env["cwd"].iterdir())


def _swanlab_scalars(path: Path) -> dict | None:
    try:
        from swanlab.proto.swanlab.record.v1.record_pb2 import Record
        from swanlab.sdk.internal.core_python.store import DataStoreReader
    except ImportError:
        return None
    reader = DataStoreReader()
    reader.open(path)
    found: dict[str, list] = {}
    while (raw := reader.scan()) is not None:
        record = Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "scalar":
            found.setdefault(record.scalar.key, []).append((record.scalar.step, record.scalar.value.number))
    return found


def _all_files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("project", ["../escape", "a/../../escape", "/absolute/escape", "bad\x00name", ""])
def test_tensorboard_project_names_that_leave_the_logging_dir_are_refused(tracker_env, project):
    library("torch.utils.tensorboard", "tensorboard")
    from drivetrain.errors import ConfigError

    logs = tracker_env["logs"]
    before = _all_files(logs.parent)
    trackers = Trackers("tensorboard", logging_dir=logs, manager=PluginManager(env={}).load())
    with pytest.raises(ConfigError) as error:
        trackers.init_trackers(project)
    message = str(error.value)
    assert "\n" not in message and ("my_project" in message or "remove it" in message), message
    assert _all_files(logs.parent) == before, "nothing is written anywhere"
    assert len(trackers) == 0


def test_tensorboard_keeps_a_project_with_subfolders_inside_the_logging_dir(tracker_env):
    library("torch.utils.tensorboard", "tensorboard")
    logs = tracker_env["logs"]
    drive("tensorboard", logs, project="group/run")
    assert list((logs / "group" / "run").glob("events.out.tfevents.*"))


def test_a_logging_dir_that_is_a_file_is_refused_before_any_tracker_starts(tracker_env):
    library("torch.utils.tensorboard", "tensorboard")
    from drivetrain.errors import ConfigError

    a_file = tracker_env["logs"].parent / "a-file"
    a_file.write_text("not a folder")
    trackers = Trackers("tensorboard", logging_dir=a_file, manager=PluginManager(env={}).load())
    with pytest.raises(ConfigError, match=r"a-file is a file, not a directory: pass another .*project_dir="):
        trackers.init_trackers("demo")
    assert a_file.read_text() == "not a folder"


def test_unknown_init_kwargs_name_the_tracker_and_the_keywords(tracker_env):
    library("torch.utils.tensorboard", "tensorboard")
    from drivetrain.errors import TrackerError

    trackers = Trackers("tensorboard", logging_dir=tracker_env["logs"], manager=PluginManager(env={}).load())
    with pytest.raises(TrackerError, match=r"^the 'tensorboard' tracker did not start: TypeError: .*'colour'.* "
                                           r"\(check init_kwargs\['tensorboard'\]: colour\)$"):
        trackers.init_trackers("demo", init_kwargs={"tensorboard": {"colour": "red"}})


def test_a_wandb_project_name_with_a_slash_is_one_line_naming_the_tracker(tracker_env):
    library("wandb", "wandb")
    from drivetrain.errors import TrackerError

    trackers = Trackers("wandb", logging_dir=tracker_env["logs"], manager=PluginManager(env={}).load())
    with pytest.raises(TrackerError, match=r"^the 'wandb' tracker did not start: .*Invalid project name 'team/demo'"):
        trackers.init_trackers("team/demo")
