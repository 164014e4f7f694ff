"""Behaviour of the environment, version and probe helpers of ``drivetrain.utils``."""

from __future__ import annotations

import os
import socket
import sys

import pytest
from packaging.version import Version

from drivetrain.utils import (
    are_libraries_initialized,
    check_os_kernel,
    clear_environment,
    compare_versions,
    convert_dict_to_env_variables,
    get_cpu_distributed_information,
    get_int_from_env,
    is_port_in_use,
    is_torch_version,
    parse_choice_from_env,
    parse_flag_from_env,
    patch_environment,
    purge_accelerate_environment,
    str_to_bool,
)


@pytest.mark.parametrize("word,answer", [("yes", 1), ("TRUE", 1), ("on", 1), ("1", 1), ("no", 0), ("Off", 0), ("0", 0)])
def test_str_to_bool(word, answer):
    assert str_to_bool(word) == answer and str_to_bool(word, to_bool=True) is bool(answer)


def test_str_to_bool_refuses_other_words():
    with pytest.raises(ValueError, match="maybe"):
        str_to_bool("maybe")


def test_patch_environment_sets_and_restores(monkeypatch):
    monkeypatch.setenv("DT_KEEP", "old")
    monkeypatch.delenv("DT_NEW", raising=False)
    with patch_environment(dt_keep="new", dt_new=3):
        assert os.environ["DT_KEEP"] == "new" and os.environ["DT_NEW"] == "3"
    assert os.environ["DT_KEEP"] == "old" and "DT_NEW" not in os.environ


def test_patch_environment_restores_after_an_error(monkeypatch):
    monkeypatch.delenv("DT_NEW", raising=False)
    with pytest.raises(RuntimeError), patch_environment(DT_NEW="1"):
        raise RuntimeError("boom")
    assert "DT_NEW" not in os.environ


def test_clear_environment_empties_then_restores(monkeypatch):
    monkeypatch.setenv("DT_KEEP", "1")
    with clear_environment():
        assert dict(os.environ) == {}
        os.environ["DT_INSIDE"] = "1"
    assert os.environ["DT_KEEP"] == "1" and "DT_INSIDE" not in os.environ


def test_purge_removes_run_variables_set_inside(monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")

    @purge_accelerate_environment
    def sets_variables():
        os.environ["ACCELERATE_USE_CPU"] = "1"
        os.environ["DRIVETRAIN_DEBUG_MODE"] = "1"
        os.environ["ACCELERATE_MIXED_PRECISION"] = "fp16"
        os.environ["OTHER_VARIABLE_DT"] = "kept"
        return "ran"

    assert sets_variables() == "ran"
    assert "ACCELERATE_USE_CPU" not in os.environ and "DRIVETRAIN_DEBUG_MODE" not in os.environ
    assert os.environ["ACCELERATE_MIXED_PRECISION"] == "bf16" and os.environ.pop("OTHER_VARIABLE_DT") == "kept"


def test_purge_decorates_the_test_methods_of_a_class():
    @purge_accelerate_environment
    class Case:
        def test_one(self):
            os.environ["ACCELERATE_FROM_TEST"] = "1"

        def helper(self):
            os.environ["ACCELERATE_FROM_HELPER"] = "1"

    Case().test_one()
    Case().helper()
    assert "ACCELERATE_FROM_TEST" not in os.environ and os.environ.pop("ACCELERATE_FROM_HELPER") == "1"


def test_purge_reaches_the_tests_of_a_subclass():
    @purge_accelerate_environment
    class Base:
        def test_base(self):
            os.environ["ACCELERATE_FROM_BASE"] = "1"

    class Derived(Base):
        def test_derived(self):
            os.environ["ACCELERATE_FROM_DERIVED"] = "1"

    class DerivedAgain(Derived):
        def test_again(self):
            os.environ["ACCELERATE_FROM_AGAIN"] = "1"

    DerivedAgain().test_base()
    DerivedAgain().test_derived()
    DerivedAgain().test_again()
    assert not {"ACCELERATE_FROM_BASE", "ACCELERATE_FROM_DERIVED", "ACCELERATE_FROM_AGAIN"} & set(os.environ)


def test_purge_keeps_a_base_class_hook_for_subclasses():
    seen = []

    @purge_accelerate_environment
    class Base:
        def __init_subclass__(cls, tag: str = "", **kwargs):
            super().__init_subclass__(**kwargs)
            seen.append(tag)

    class Derived(Base, tag="mine"):
        def test_one(self):
            os.environ["ACCELERATE_FROM_HOOKED"] = "1"

    Derived().test_one()
    assert seen == ["mine"] and "ACCELERATE_FROM_HOOKED" not in os.environ


def test_flags_choices_and_ints_from_env(monkeypatch):
    monkeypatch.setenv("DT_FLAG", "yes")
    monkeypatch.setenv("DT_CHOICE", "bf16")
    monkeypatch.setenv("DT_B", "7")
    monkeypatch.delenv("DT_A", raising=False)
    assert parse_flag_from_env("DT_FLAG") is True and parse_flag_from_env("DT_UNSET_FLAG", default=False) is False
    assert parse_choice_from_env("DT_CHOICE") == "bf16" and parse_choice_from_env("DT_UNSET", "no") == "no"
    assert get_int_from_env(["DT_A", "DT_B"], 1) == 7 and get_int_from_env(["DT_A"], 5) == 5


def test_cpu_distributed_information_from_mpi_variables(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    info = get_cpu_distributed_information()
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (3, 4, 1, 2)


def test_convert_dict_to_env_variables_skips_unsafe_entries(caplog):
    lines = convert_dict_to_env_variables({"GOOD": "1", "BAD": "a;b", "SPACE": "a b", "EMPTY": ""})
    assert lines == ["GOOD=1\n"]
    assert "BAD" in caplog.text


def test_are_libraries_initialized():
    assert are_libraries_initialized("sys", "surely_not_imported_library") == ["sys"]


def test_is_port_in_use():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert is_port_in_use(port) is True
    assert is_port_in_use(port) is False


def test_check_os_kernel_warns_on_an_old_linux(monkeypatch, caplog):
    import platform

    fake = platform.uname()._replace(system="Linux", release="4.19.0-generic")
    monkeypatch.setattr(platform, "uname", lambda: fake)
    check_os_kernel()
    assert "4.19.0" in caplog.text
    # log filters read the record's own message, so the versions are in it, not in its arguments
    assert "4.19.0" in caplog.records[0].msg and "5.5.0" in caplog.records[0].msg
    caplog.clear()
    monkeypatch.setattr(platform, "uname", lambda: fake._replace(release="6.1.0"))
    check_os_kernel()
    assert caplog.text == ""


def test_compare_versions():
    import torch

    assert compare_versions("packaging", ">=", "20.0")
    assert compare_versions("1.2.3", "<", "1.10") and not compare_versions(Version("2.0"), "!=", "2.0")
    with pytest.raises(ValueError):
        compare_versions("1.0", "=>", "1.0")
    release = Version(torch.__version__).base_version
    assert is_torch_version("==", release) and is_torch_version("<", "99.0") and not is_torch_version(">", release)


def test_library_probes_agree_with_find_spec():
    import importlib.util

    from drivetrain import utils

    for name in ("transformers", "pandas", "timm", "datasets", "peft"):
        assert getattr(utils, f"is_{name}_available")() == (importlib.util.find_spec(name) is not None)


def test_probes_import_nothing():
    import subprocess

    code = ("import sys; from drivetrain.utils import is_pandas_available, is_wandb_available;"
            "is_pandas_available(); is_wandb_available(); print('pandas' in sys.modules, 'wandb' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
