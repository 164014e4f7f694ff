"""The config file: where it lives, Accelerate's files unchanged, one clear error per mistake,
writing, updating and the questionnaire answered by a program."""

from __future__ import annotations

import json
import sys
import warnings

import pytest
import yaml
from fake_plugins import fake_plugin
from local_devices import local_accelerator, local_device_count

from drivetrain.config import (
    Config,
    accelerate_config_paths,
    config_from_dict,
    default_config_path,
    find_config_path,
    load_config,
    update_config,
    write_basic_config,
    write_config,
)
from drivetrain.errors import ConfigError
from drivetrain.plugin_api import ConfigField, ConfigSection, PluginInfo, StrategySpec, hookimpl
from importlib import metadata as importlib_metadata
from drivetrain.plugin_manager import PluginManager

# What `accelerate config` writes on a CPU machine (Accelerate 1.x), unchanged.
ACCELERATE_MULTI_CPU = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_CPU
downcast_bf16: 'no'
enable_cpu_affinity: false
ipex_config:
  ipex: false
machine_rank: 0
main_process_ip: 127.0.0.1
main_process_port: 29500
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
"""

# ... and on a GPU machine, with an FSDP block for a plugin that is not installed.
ACCELERATE_MULTI_GPU = """\
compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config: {}
distributed_type: MULTI_GPU
downcast_bf16: 'no'
enable_cpu_affinity: false
fsdp_config: {}
gpu_ids: all
machine_rank: 0
main_training_function: main
megatron_lm_config: {}
mixed_precision: fp16
num_machines: 1
num_processes: 8
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""


@pytest.fixture(autouse=True)
def isolated_home(monkeypatch, tmp_path):
    for key in ("HF_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "DRIVETRAIN_CONFIG_FILE", "ACCELERATE_CONFIG_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def write(tmp_path, text, name="config.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_where_the_file_lives(monkeypatch, tmp_path):
    home = tmp_path / "home"
    assert default_config_path() == home / ".config" / "drivetrain" / "default_config.yaml"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert default_config_path() == tmp_path / "xdg" / "drivetrain" / "default_config.yaml"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert default_config_path() == tmp_path / "hf" / "drivetrain" / "default_config.yaml"
    monkeypatch.setenv("DRIVETRAIN_CONFIG_FILE", str(tmp_path / "mine.yaml"))
    assert default_config_path() == tmp_path / "mine.yaml"
    with pytest.raises(ConfigError, match="DRIVETRAIN_CONFIG_FILE=.*names no file"):
        load_config()


def test_an_accelerate_file_in_accelerates_place_is_read_when_drivetrain_has_none(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert load_config() is None
    accelerate = accelerate_config_paths()[0]
    accelerate.parent.mkdir(parents=True)
    accelerate.write_text(ACCELERATE_MULTI_CPU)
    assert find_config_path() == accelerate and load_config().num_processes == 2
    own = write_basic_config(save_location=default_config_path())
    assert find_config_path() == own  # drivetrain's own file comes first


@pytest.mark.parametrize("text", [ACCELERATE_MULTI_CPU, ACCELERATE_MULTI_GPU])
def test_accelerate_files_are_accepted_unchanged(tmp_path, text):
    config = load_config(write(tmp_path, text))
    data = yaml.safe_load(text)
    assert config.num_processes == data["num_processes"] and config.distributed_type == data["distributed_type"]
    assert config.mixed_precision == data["mixed_precision"] and config.use_cpu == data["use_cpu"]
    assert config.get("tpu_use_cluster") is False and config.get("downcast_bf16") == "no"
    assert config.get("gpu_ids", "all") == "all"
    assert {k: v for k, v in config.to_dict().items() if k in data} == {
        k: v for k, v in data.items() if k in config.to_dict()}


def test_json_files_and_json_in_a_yaml_file(tmp_path):
    data = yaml.safe_load(ACCELERATE_MULTI_CPU)
    assert load_config(write(tmp_path, json.dumps(data), "c.json")).num_processes == 2
    assert load_config(write(tmp_path, json.dumps(data), "c.yaml")).num_processes == 2  # as Accelerate writes it


@pytest.mark.parametrize("text, message", [
    ("num_processs: 2\n", r"unknown key 'num_processs' \(did you mean 'num_processes'\?\)"),
    ("num_processes: two\n", r"key 'num_processes' must be a whole number, not 'two'"),
    ("use_cpu: maybe\n", r"key 'use_cpu' must be true or false, not 'maybe'"),
    ("rdzv_backend: carrier-pigeon\n", r"key 'rdzv_backend' is 'carrier-pigeon'; allowed: static, c10d"),
    ("mixed_precision: fp4\n", r"mixed_precision is 'fp4'; installed plugins offer: no, .*bf16"),
    ("distributed_type: MULTI_QPU\n", r"distributed_type is 'MULTI_QPU'.*MULTI_CPU"),
    ("distributed_type: 'NO'\nnum_processes: 2\n", r"distributed_type is NO \(one process\) but num_processes is 2"),
    ("num_processes: 3\nnum_machines: 2\nmain_process_ip: x\n", r"num_processes \(3\) must be a multiple of num_machines"),
    ("num_machines: 2\nnum_processes: 2\n", r"num_machines is 2 but main_process_ip is not set"),
    ("machine_rank: 1\n", r"machine_rank \(1\) must be between 0 and num_machines - 1 \(0\)"),
    ("use_cpu: true\ndistributed_type: MULTI_GPU\nnum_processes: 2\n", r"use_cpu is true but distributed_type MULTI_GPU"),
    ("distributed_type: XLA\nmixed_precision: fp16\n", r"'fp16' is not supported by platform 'xla'"),
    ("tpu_use_cluster: true\n", r"key 'tpu_use_cluster' belongs to plugin 'xla'.*pip install 'drivetrain\[xla\]'"),
    ("warp_config:\n  warp_speed: 9\n", r"unknown key 'warp_config'( \(did you mean '\w+'\?\))?; no installed plugin owns it"),
    ("dynamo_config:\n  dynamo_backnd: INDUCTOR\n", r"unknown key dynamo_config.dynamo_backnd \(did you mean 'dynamo_backend'\?\)"),
    ("dynamo_config: inductor\n", r"'dynamo_config' must be a mapping"),
    ("platform: tpu\n", r"platform is 'tpu'; installed: .*cpu, cuda"),
    ("- a\n- b\n", r"must hold a mapping of keys to values, not a list"),
    ("num_processes: [\n", r"is not valid YAML"),
    ("!!python/object/apply:os.system ['true']\n", r"is not valid YAML"),  # safe loader only
])
def test_malformed_files_give_one_clear_error_naming_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as error:
        load_config(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_missing_or_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist; create it with `drivetrain config --config-file"):
        load_config(tmp_path / "nope.yaml")
    assert load_config(write(tmp_path, "")).num_processes == 1  # an empty file is all defaults
    with pytest.raises(ConfigError, match="is not valid JSON"):
        load_config(write(tmp_path, "{", "c.json"))


def test_yaml_no_and_strings_are_read_sensibly(tmp_path):
    config = load_config(write(tmp_path, "mixed_precision: no\ndowncast_bf16: no\nuse_cpu: 'true'\n"
                                         "main_process_port: '29501'\nnum_processes: 1\n"))
    assert (config.mixed_precision, config.get("downcast_bf16"), config.use_cpu, config.main_process_port) == (
        "no", "no", True, 29501)


def plugin_with_block():
    info = PluginInfo(api_version="2.0")

    @hookimpl
    def drivetrain_register_strategies():
        return [StrategySpec(name="shard", distributed_type="SHARD", config_section="shard_config")]

    @hookimpl
    def drivetrain_register_config_sections():
        return [ConfigSection("shard_config", fields=(
            ConfigField("shard_stage", int, 1, choices=(1, 2, 3), ask=True, help="Which stage?",
                        env="SHARD_STAGE"),
            ConfigField("shard_offload", bool, False, env="SHARD_OFFLOAD"),
        ), enabled_when="SHARD")]

    return fake_plugin("shard", PLUGIN_INFO=info, drivetrain_register_strategies=drivetrain_register_strategies,
                       drivetrain_register_config_sections=drivetrain_register_config_sections)


def manager_with(*fakes, requires=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PluginManager(env={}, entry_points=[
            *importlib_metadata.entry_points(group="drivetrain.plugins"), *fakes]).load()


def test_plugin_blocks_are_checked_against_their_fields():
    manager = manager_with(plugin_with_block())
    config = config_from_dict({"distributed_type": "SHARD", "num_processes": 2,
                               "shard_config": {"shard_stage": "2", "shard_offload": True}}, manager)
    assert config.sections["shard_config"] == {"shard_stage": 2, "shard_offload": True}
    with pytest.raises(ConfigError, match=r"key shard_config.shard_stage is 4; allowed: 1, 2, 3"):
        config_from_dict({"shard_config": {"shard_stage": 4}}, manager)
    with pytest.raises(ConfigError, match=r"unknown key shard_config.shard_stag \(did you mean 'shard_stage'\?\); "
                                          r"shard_config accepts: shard_offload, shard_stage"):
        config_from_dict({"distributed_type": "SHARD", "num_processes": 2, "shard_config": {"shard_stag": 2}}, manager)


def test_an_unknown_key_in_a_block_the_file_does_not_use_is_a_warning(caplog):
    manager = manager_with(plugin_with_block())
    # an Accelerate file may keep the block of a strategy it no longer uses: nothing reads it
    config = config_from_dict({"distributed_type": "MULTI_CPU", "num_processes": 2,
                               "shard_config": {"shard_stag": 2, "shard_offload": "yes"}}, manager)
    assert config.sections["shard_config"] == {"shard_stag": 2, "shard_offload": True}
    assert "unknown key shard_config.shard_stag (did you mean 'shard_stage'?), ignored" in caplog.text
    with pytest.raises(ConfigError, match=r"key shard_config.shard_offload must be true or false"):
        config_from_dict({"shard_config": {"shard_offload": "maybe"}}, manager)  # known keys are still checked


def test_a_block_of_an_unavailable_plugin_names_the_install_command():
    info = PluginInfo(api_version="2.0", requires=("surely-not-installed-lib>=1",), extra="shard")

    @hookimpl
    def drivetrain_register_config_sections():
        return [ConfigSection("shard_config", fields=(ConfigField("shard_stage", int, 1),))]

    manager = manager_with(fake_plugin("shard", PLUGIN_INFO=info,
                                       drivetrain_register_config_sections=drivetrain_register_config_sections))
    assert config_from_dict({"shard_config": {}}, manager).sections["shard_config"] == {}
    with pytest.raises(ConfigError, match=r"'shard_config' belongs to plugin 'shard'.*pip install 'drivetrain\[shard\]'"):
        config_from_dict({"shard_config": {"shard_stage": 3}}, manager)


def test_a_block_of_an_unavailable_plugin_the_file_does_not_choose_is_kept_with_a_warning(caplog):
    info = PluginInfo(api_version="2.0", requires=("surely-not-installed-lib>=1",), extra="shard")

    @hookimpl
    def drivetrain_register_config_sections():
        return [ConfigSection("shard_config", fields=(ConfigField("shard_stage", int, 1),), enabled_when="SHARD")]

    @hookimpl
    def drivetrain_register_strategies():
        return [StrategySpec(name="shard", distributed_type="SHARD", config_section="shard_config")]

    manager = manager_with(fake_plugin("shard", PLUGIN_INFO=info, drivetrain_register_strategies=drivetrain_register_strategies,
                                       drivetrain_register_config_sections=drivetrain_register_config_sections))
    config = config_from_dict({"distributed_type": "NO", "shard_config": {"shard_stage": 3}}, manager)
    assert config.sections["shard_config"] == {"shard_stage": 3}
    assert "shard_config is kept but not used: plugin 'shard' cannot be used here" in caplog.text
    with pytest.raises(ConfigError, match=r"'shard_config' belongs to plugin 'shard'"):
        config_from_dict({"distributed_type": "SHARD", "shard_config": {"shard_stage": 3}}, manager)


def test_write_update_and_round_trip(tmp_path):
    path = write_basic_config("bf16", tmp_path / "d" / "c.yaml")
    assert path == tmp_path / "d" / "c.yaml"
    assert write_basic_config("bf16", path) is False  # never overwrites
    config = load_config(path)
    count = local_device_count()  # every device of this machine's platform, or one CPU process
    assert (config.mixed_precision, config.num_processes, config.use_cpu) == ("bf16", count, local_accelerator() == "cpu")
    assert (config.distributed_type == "NO") if count == 1 else config.distributed_type.startswith("MULTI_")
    with pytest.raises(ConfigError, match="mixed_precision is 'fp7'"):
        write_basic_config("fp7", tmp_path / "other.yaml")
    assert not (tmp_path / "other.yaml").exists()
    path.write_text("num_processes: 2\ndistributed_type: MULTI_CPU\nmixed_precision: fp16\n")
    update_config(path)
    updated = yaml.safe_load(path.read_text())
    assert updated["num_processes"] == 2 and updated["mixed_precision"] == "fp16"
    assert updated["rdzv_backend"] == "static" and "compute_environment" in updated  # current keys added
    json_path = write_config(Config(num_processes=1, mixed_precision="fp16"), tmp_path / "c.json")
    assert json.loads(json_path.read_text())["mixed_precision"] == "fp16"


def test_questionnaire_answered_by_a_program(cli, tmp_path):
    path = tmp_path / "asked.yaml"
    answers = "cpu\n1\n2\n\nbf16\nno\n"  # platform, machines, processes, strategy, precision, debug
    result = cli("config", "--config-file", str(path), input=answers)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"drivetrain config saved at {path}" in result.stdout
    config = load_config(path)
    assert (config.num_processes, config.distributed_type, config.mixed_precision, config.use_cpu) == (
        2, "MULTI_CPU", "bf16", True)
    bad = cli("config", "--config-file", str(tmp_path / "no.yaml"), input="cpu\nmany\n")
    assert bad.returncode == 2 and "must be a whole number, not 'many'; try again" in bad.stdout
    assert "standard input ended" in bad.stderr and not (tmp_path / "no.yaml").exists()


def test_config_default_and_update_commands(cli, tmp_path):
    path = tmp_path / "c.yaml"
    result = cli("config", "default", "--config_file", str(path), "--mixed_precision", "fp16")
    assert result.returncode == 0 and load_config(path).mixed_precision == "fp16"
    assert cli("config", "default", "--config-file", str(path)).returncode == 1
    result = cli("config", "update", "--config-file", str(path))
    assert result.returncode == 0 and "Successfully updated" in result.stdout
    path.write_text("num_processs: 2\n")
    result = cli("config", "update", "--config-file", str(path))
    assert result.returncode == 2 and "unknown key 'num_processs'" in result.stderr


def test_the_launcher_refuses_a_bad_file_before_starting_anything(cli, tmp_path):
    path = write(tmp_path, "mixed_precision: fp4\n")
    result = cli("launch", "--config-file", str(path), "script.py")
    assert result.returncode == 2
    assert "drivetrain: error: config file" in result.stderr and "mixed_precision is 'fp4'" in result.stderr


def test_a_descriptive_key_of_an_unavailable_plugin_is_read(tmp_path):
    info = PluginInfo(api_version="2.0", requires=("surely-not-installed-lib>=1",), extra="pod")

    @hookimpl
    def drivetrain_register_config_sections():
        return [ConfigSection("", fields=(ConfigField("pod_name", str, None, needs_library=False),
                                          ConfigField("pod_turbo", bool, False)))]

    manager = manager_with(fake_plugin("pod", PLUGIN_INFO=info,
                                       drivetrain_register_config_sections=drivetrain_register_config_sections))
    assert config_from_dict({"pod_name": "pod-7"}, manager).get("pod_name") == "pod-7"
    with pytest.raises(ConfigError, match=r"key 'pod_turbo' belongs to plugin 'pod'"):
        config_from_dict({"pod_turbo": True}, manager)
    # the built-in xla plugin's pod description, read where torch_xla is missing (tpu-config runs there)
    path = write(tmp_path, "tpu_name: test-tpu\ntpu_zone: us-central1-a\ncommands: null\n"
                           "command_file: setup.sh\n")
    assert load_config(path).get("tpu_name") == "test-tpu"


def test_a_key_repeated_with_the_same_value_loses_nothing(tmp_path):
    config = load_config(write(tmp_path, "debug: false\nnum_processes: 1\ndebug: false\n"))
    assert config.debug is False
    assert load_config(write(tmp_path, '{"debug": true, "debug": true}', "c.json")).debug is True
