"""The tracking facade: choosing trackers from ``log_with``, their life cycle, and its errors.

Most tests use in-process plugins (``fake_plugins``) and small tracker classes defined here;
the ``all`` test and the template test use the real installed plugins and libraries.
"""

from __future__ import annotations

import enum
import json
import logging
import warnings
from pathlib import Path

import pytest
from fake_plugins import fake_plugin
from tracker_env import trackio_dir, tracker_env  # noqa: F401  (fixtures)

import drivetrain.plugin_manager as plugin_manager
from drivetrain.errors import ConfigError, TrackerError
from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl
from drivetrain.plugin_manager import PluginManager
from drivetrain.tracking import GeneralTracker, Trackers, plain_value

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")


class Recorder(GeneralTracker):
    """A tracker that keeps every call in a list shared by the class."""

    name = "recorder"
    requires_logging_directory = False
    calls: list = []

    def __init__(self, run_name, logging_dir=None, **kwargs):
        super().__init__()
        self.run_name, self.logging_dir, self.kwargs = run_name, logging_dir, kwargs
        type(self).calls.append(("init", run_name, logging_dir, kwargs))

    @property
    def tracker(self):
        return {"backend-of": self.name}

    def start(self):
        type(self).calls.append(("start", self.name))

    def store_init_configuration(self, values):
        type(self).calls.append(("config", self.name, values))

    def log(self, values, step=None, **kwargs):
        type(self).calls.append(("log", self.name, values, step, kwargs))

    def on_checkpoint(self, event, directory):
        type(self).calls.append(("checkpoint", self.name, event, directory))

    def finish(self):
        type(self).calls.append(("finish", self.name))


class EveryRank(Recorder):
    """Logs from every process (``main_process_only = False``)."""

    name = "everyrank"
    main_process_only = False


class NeedsDir(Recorder):
    name = "needsdir"
    requires_logging_directory = True

    def __init__(self, run_name, logging_dir, **kwargs):
        super().__init__(run_name, logging_dir, **kwargs)


class Broken(Recorder):
    name = "broken"

    def start(self):
        raise RuntimeError("backend refused the connection")


def tracker_plugin(plugin, *classes, requires=(), extra=None):
    """An in-process plugin registering ``classes`` as trackers."""

    @hookimpl
    def drivetrain_register_trackers():
        return [TrackerSpec(name=c.name, factory=c, requires_logging_directory=c.requires_logging_directory)
                for c in classes]

    info = PluginInfo(api_version="2.0", description=f"{plugin} trackers", requires=requires, extra=extra)
    return fake_plugin(plugin, PLUGIN_INFO=info, drivetrain_register_trackers=drivetrain_register_trackers)


@pytest.fixture
def manager(monkeypatch):
    """A plugin manager with fake tracker plugins only; also the process-wide one."""
    Recorder.calls = []
    entry_points = [
        tracker_plugin("recorders", Recorder, EveryRank, NeedsDir),
        tracker_plugin("flaky", Broken),
        tracker_plugin("fancy", type("Fancy", (Recorder,), {"name": "fancy"}),
                       requires=("drivetrain-no-such-tracker-library>=1.0",), extra="fancy"),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = PluginManager(env={}, entry_points=entry_points).load()
    monkeypatch.setattr(plugin_manager, "_default_manager", loaded)
    return loaded


def test_a_name_selects_the_registered_tracker_and_drives_its_life(manager, tmp_path):
    trackers = Trackers("recorder", logging_dir=tmp_path)
    assert bool(trackers) and trackers.names == ["recorder"] and len(trackers) == 0
    assert Recorder.calls == [], "nothing is created before init_trackers"
    trackers.init_trackers("proj", config={"lr": 0.1}, init_kwargs={"recorder": {"tags": ["a"]}, "other": {"x": 1}})
    trackers.log({"loss": 1.0}, step=3, log_kwargs={"recorder": {"commit": True}, "other": {"y": 2}})
    trackers.on_checkpoint("save", tmp_path / "ckpt")
    trackers.end_training()
    trackers.end_training()  # once only
    assert Recorder.calls == [
        ("init", "proj", str(tmp_path), {"tags": ["a"]}),
        ("start", "recorder"),
        ("config", "recorder", {"lr": 0.1}),
        ("log", "recorder", {"loss": 1.0}, 3, {"commit": True}),
        ("checkpoint", "recorder", "save", str(tmp_path / "ckpt")),
        ("finish", "recorder"),
    ]
    assert [t.name for t in trackers] == ["recorder"]


def test_names_may_be_enum_members_any_case_and_mixed_with_instances(manager, tmp_path):
    class Kind(str, enum.Enum):
        RECORDER = "recorder"

    mine = EveryRank("mine")
    Recorder.calls = []
    trackers = Trackers([Kind.RECORDER, mine, "NeedsDir", "recorder"], logging_dir=tmp_path)
    assert trackers.names == ["recorder", "everyrank", "needsdir"]
    trackers.init_trackers("proj")
    assert trackers.get_tracker("everyrank") is mine
    assert trackers.get_tracker("recorder", unwrap=True) == {"backend-of": "recorder"}
    with pytest.raises(ConfigError, match="'nope' is not one of this run's trackers: recorder, everyrank, needsdir"):
        trackers.get_tracker("nope")


def test_the_open_logger_type_enum_is_accepted(manager, tmp_path):
    from drivetrain.enums import LoggerType

    trackers = Trackers([LoggerType.RECORDER, LoggerType.ALL], logging_dir=tmp_path)
    assert trackers.names[0] == "recorder" and "everyrank" in trackers.names


def test_unknown_name_lists_the_installed_trackers(manager):
    with pytest.raises(ConfigError) as error:
        Trackers("tensorbored")
    message = str(error.value)
    assert "unknown tracker 'tensorbored'" in message
    assert "installed trackers: broken, everyrank, fancy, needsdir, recorder" in message and "'all'" in message


def test_missing_library_names_the_install_command(manager):
    with pytest.raises(ConfigError) as error:
        Trackers("fancy")
    message = str(error.value)
    assert "tracker 'fancy' cannot be used" in message
    assert "needs drivetrain-no-such-tracker-library" in message
    assert "pip install 'drivetrain[fancy]'" in message


def test_a_tracker_that_writes_files_needs_a_directory(manager):
    # Accelerate's wording first: scripts and log filters match on it
    with pytest.raises(ConfigError, match="^Logging with `needsdir` requires a `logging_dir`: .*project_dir=.*logging_dir="):
        Trackers("needsdir", logging_dir=None)


def test_log_with_rejects_what_is_not_a_tracker(manager):
    with pytest.raises(ConfigError, match="not int"):
        Trackers(["recorder", 3])


def test_all_takes_every_usable_tracker_and_skips_what_cannot_work(manager, caplog):
    with caplog.at_level(logging.WARNING, logger="drivetrain.tracking"):
        trackers = Trackers("all", logging_dir=None)
        # Not fancy (its library is missing), nor needsdir (no directory).
        assert sorted(trackers.names) == ["broken", "everyrank", "recorder"]
        assert "needsdir" in caplog.text
        trackers.init_trackers("proj")
    assert sorted(t.name for t in trackers) == ["everyrank", "recorder"]
    assert "leaves out the 'broken' tracker: it failed to start: RuntimeError: backend refused" in caplog.text


def test_an_explicit_tracker_that_fails_to_start_raises(manager):
    trackers = Trackers(["recorder", "broken"])
    with pytest.raises(TrackerError, match="^the 'broken' tracker did not start: RuntimeError: backend refused"):
        trackers.init_trackers("proj")
    assert ("finish", "recorder") in Recorder.calls, "the tracker already started is closed"


class FailsToLog(Recorder):
    name = "failstolog"

    def log(self, values, step=None, **kwargs):
        raise ValueError("the server said\nno")


def test_a_tracker_whose_log_raises_is_named_in_one_line_and_the_run_goes_on(manager, caplog):
    trackers = Trackers([FailsToLog("proj"), "recorder"])
    trackers.init_trackers("proj")
    with caplog.at_level(logging.WARNING, logger="drivetrain.tracking"):
        for step in (4, 5, 6):
            trackers.log({"loss": float(step)}, step=step)  # never raises: the training goes on
    failures = [r.getMessage() for r in caplog.records if "failstolog" in r.getMessage()]
    assert failures == ["the 'failstolog' tracker failed to log step 4 (ValueError: the server said no); the run "
                        "goes on and the other trackers logged it; this tracker's later failures are counted and "
                        "reported at end_training"]
    logged = [call[3] for call in Recorder.calls if call[:2] == ("log", "recorder")]
    assert logged == [4, 5, 6]  # the tracker after the failing one has every step
    assert trackers.log_failures() == {"failstolog": 3}
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="drivetrain.tracking"):
        trackers.end_training()
    assert "the 'failstolog' tracker failed to log 3 time(s) in this run" in caplog.text


def test_init_kwargs_for_a_tracker_not_in_log_with_are_named_in_a_warning(manager, caplog):
    trackers = Trackers("recorder")
    with caplog.at_level(logging.WARNING, logger="drivetrain.tracking"):
        trackers.init_trackers("proj", init_kwargs={"wandb": {"entity": "me"}, "recorder": {"tags": ["a"]}})
    assert "init_kwargs for 'wandb' not used: not in log_with (recorder)" in caplog.text
    assert "'recorder'" not in caplog.text.split("not used")[0]
    for bad in (["recorder"], {"recorder": ["tags"]}, {"recorder": {1: "x"}}):
        with pytest.raises(ConfigError, match="init_kwargs"):
            trackers.init_trackers("proj", init_kwargs=bad)


@pytest.mark.parametrize("project", ["../escape", "/abs", "x\x00y", "", 3])
def test_project_names_that_cannot_stay_inside_the_logging_dir_are_refused(manager, tmp_path, project):
    Recorder.calls = []
    trackers = Trackers("needsdir", logging_dir=tmp_path)
    with pytest.raises(ConfigError, match="init_trackers|project"):
        trackers.init_trackers(project)
    assert Recorder.calls == [], "refused before any tracker is created"


def test_other_processes_log_only_to_trackers_that_collect_from_every_process(manager, tmp_path):
    instance = Recorder("mine")  # main-process-only, made by the user on every rank
    Recorder.calls = []
    trackers = Trackers(["recorder", "everyrank", instance], logging_dir=tmp_path, is_main_process=False)
    trackers.init_trackers("proj", config={"lr": 0.1})
    trackers.log({"loss": 1.0}, step=1)
    trackers.end_training()
    assert [t.name for t in trackers] == ["everyrank"]
    assert {call[1] for call in Recorder.calls if call[0] != "init"} == {"everyrank"}
    blank = trackers.get_tracker("recorder")
    assert blank.is_blank and blank.tracker is None and trackers.get_tracker("recorder", unwrap=True).is_blank
    blank.log({"loss": 1.0})
    blank.log_images({"x": None})
    blank.log_table("t", columns=["a"], data=[[1]])
    blank.finish()
    with pytest.raises(NotImplementedError, match="cannot log images"):
        Recorder("real").log_images({"x": None})


def test_the_chosen_plugins_become_active_in_the_run(manager):
    class FakeRun:
        def __init__(self):
            self.manager, self.activated = manager, []

        def activate(self, *names):
            self.activated.extend(names)

    run = FakeRun()
    Trackers(["recorder", "needsdir", "broken"], logging_dir=".", run=run)
    assert run.activated == ["recorders", "flaky"]


@pytest.fixture
def tracker_registry(monkeypatch):
    """The process's registered tracker classes and removed plugin names, empty for the test."""
    import drivetrain.tracking as tracking

    monkeypatch.setattr(tracking, "_USER_TRACKERS", {})
    monkeypatch.setattr(tracking, "_REMOVED_PLUGIN_TRACKERS", set())
    return tracking


def test_logger_type_to_class_maps_the_plugins_tracker_names_to_their_classes(manager, tracker_registry):
    classes = tracker_registry.LOGGER_TYPE_TO_CLASS
    # every registered tracker, usable or not (Accelerate lists its classes whatever is installed)
    assert sorted(classes) == ["broken", "everyrank", "fancy", "needsdir", "recorder"]
    assert classes["recorder"] is Recorder and classes["NeedsDir"] is NeedsDir
    assert "nothing" not in classes and 3 not in classes
    with pytest.raises(KeyError):
        classes["nothing"]


def test_deleting_a_name_unselects_it_and_restoring_a_copy_gives_it_back_to_its_plugin(manager, tracker_registry):
    classes = tracker_registry.LOGGER_TYPE_TO_CLASS
    saved = dict(classes)
    classes.clear()
    assert len(classes) == 0
    with pytest.raises(ConfigError, match="unknown tracker 'recorder'"):
        Trackers("recorder")
    classes.update(saved)
    assert dict(classes) == saved
    run = type("FakeRun", (), {"manager": manager, "activate": lambda self, *names: self.names.extend(names)})()
    run.names = []
    Trackers("recorder", run=run)
    assert run.names == ["recorders"]  # selected through its plugin again, not as a script's class


def test_register_tracker_class_needs_both_attributes_and_warns_when_it_replaces(manager, tracker_registry):
    from drivetrain.tracking import register_tracker_class

    class NoDirectoryFlag(GeneralTracker):
        name = "noflag"

    class NoName(GeneralTracker):
        requires_logging_directory = False

    for bad in (NoDirectoryFlag, NoName):
        with pytest.raises(ConfigError, match="needs a class attribute"):
            register_tracker_class(bad)

    class Shadow(Recorder):  # inherits both attributes from a tracker class: that counts
        pass

    with pytest.warns(UserWarning, match="replaces the tracker registered as 'recorder'"):
        register_tracker_class(Shadow)
    assert tracker_registry.LOGGER_TYPE_TO_CLASS["recorder"] is Shadow
    trackers = Trackers("recorder")
    trackers.init_trackers("proj")
    assert isinstance(trackers.get_tracker("recorder"), Shadow)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        register_tracker_class(Shadow)  # the same class again: nothing to warn about


def test_plain_value_turns_one_element_tensors_and_arrays_into_numbers():
    import numpy as np
    import torch

    assert plain_value(torch.tensor(1.5)) == 1.5 and isinstance(plain_value(torch.tensor([2])), int)
    assert plain_value(np.float32(0.25)) == 0.25 and type(plain_value(np.float32(0.25))) is float
    vector = torch.ones(3)
    assert plain_value(vector) is vector and plain_value("text") == "text"


def test_the_template_jsonl_tracker_works_through_the_facade(template_site, with_sites, tmp_path, monkeypatch):
    with_sites(template_site)
    monkeypatch.setattr(plugin_manager, "_default_manager", None)
    plugin_manager.reset_plugin_manager()
    trackers = Trackers("jsonl", logging_dir=tmp_path)
    assert plugin_manager.get_plugin_manager().records["jsonl"].source == "third-party"
    trackers.init_trackers("demo", config={"lr": 0.1})
    trackers.log({"loss": 1.5}, step=3)
    trackers.on_checkpoint("save", tmp_path / "ckpt")
    trackers.end_training()
    lines = [json.loads(line) for line in (tmp_path / "demo" / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["values"] == {"loss": 1.5} and lines[0]["step"] == 3
    assert lines[1]["event"] == "checkpoint-save" and lines[1]["directory"] == str(tmp_path / "ckpt")
    assert json.loads((tmp_path / "demo" / "config.json").read_text()) == {"lr": 0.1}


def test_all_logs_to_every_installed_tracker(tracker_env, monkeypatch):
    """``log_with="all"`` with the real plugins: each installed library gets the run."""
    monkeypatch.setattr(plugin_manager, "_default_manager", None)
    real = plugin_manager.get_plugin_manager()
    installed = sorted(spec.name for plugin, spec in real.registrations("drivetrain_register_trackers")
                       if real.records[plugin].usable and real.records[plugin].source == "built-in")
    if not installed:
        pytest.skip("no tracker library is installed (pip install 'drivetrain[tensorboard,wandb,...]')")
    logs = tracker_env["logs"]
    trackers = Trackers("all", logging_dir=logs)
    assert set(installed) <= set(trackers.names)
    trackers.init_trackers("everything", config={"lr": 0.1}, init_kwargs={
        "aim": {"system_tracking_interval": None, "log_system_params": False, "capture_terminal_logs": False},
        "clearml": {"auto_connect_frameworks": False, "auto_resource_monitoring": False,
                    "auto_connect_streams": False, "auto_connect_arg_parser": False},
        "trackio": {"auto_log_cpu": False, "name": f"all-{logs.parent.name}"},
    })
    assert sorted(t.name for t in trackers if t.name in installed) == installed, "a tracker failed to start"
    if "clearml" in installed:  # ClearML returns its own Path type
        clearml_folder = Path(str(trackers.get_tracker("clearml", unwrap=True).get_offline_mode_folder()))
    trackers.log({"loss": 0.5}, step=1)
    trackers.end_training()

    written = {
        "tensorboard": lambda: list((logs / "everything").glob("events.out.tfevents.*")),
        "wandb": lambda: list((logs / "wandb").glob("offline-run-*/run-*.wandb")),
        "mlflow": lambda: (logs / "mlflow.db").is_file(),
        "comet_ml": lambda: list((logs / "comet").glob("*.zip")),
        "aim": lambda: (logs / ".aim").is_dir(),
        "clearml": lambda: (clearml_folder.parent == tracker_env["clearml"] / "offline"
                            and '"loss"' in (clearml_folder / "metrics.jsonl").read_text()),
        "dvclive": lambda: json.loads((logs / "dvclive" / "metrics.json").read_text())["loss"] == 0.5,
        "trackio": lambda: list(tracker_env["trackio"].glob("everything*")),
        "swanlab": lambda: list((logs / "swanlog").glob("run-*/run-*.swanlab")),
    }
    missing = [name for name in installed if name in written and not written[name]()]
    assert missing == [], f"log_with='all' wrote nothing for {missing}"
    assert not any(tracker_env["cwd"].iterdir())


def test_discovering_and_selecting_trackers_imports_no_tracker_library():
    """Plugins name their tracker classes lazily: nothing heavy until init_trackers."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from drivetrain.plugin_manager import PluginManager\n"
        "from drivetrain.tracking import Trackers\n"
        "manager = PluginManager(env={}).load()\n"
        "Trackers('all', logging_dir='unused', manager=manager)\n"
        "from drivetrain.tracking import LOGGER_TYPE_TO_CLASS\n"
        "assert 'tensorboard' in LOGGER_TYPE_TO_CLASS and 'wandb' in list(LOGGER_TYPE_TO_CLASS)\n"
        "libraries = ('torch', 'tensorboard', 'wandb', 'mlflow', 'comet_ml', 'aim', 'clearml', 'dvclive',\n"
        "             'trackio', 'swanlab')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(libraries)))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
