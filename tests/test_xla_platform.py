"""The xla platform plugin's contract: registered, refused without torch_xla (with the install
command), and owner of Accelerate's TPU keys. The platform itself needs a TPU."""

from __future__ import annotations

import importlib.util

import pytest

from drivetrain.cluster import ClusterEnvironment
from drivetrain.config import config_from_dict
from drivetrain.errors import ConfigError, PluginSelectionError
from drivetrain.plugin_manager import PluginStatus, get_plugin_manager
from drivetrain.selection import Requests, select

HAS_XLA = importlib.util.find_spec("torch_xla") is not None


def test_spec_and_status():
    manager = get_plugin_manager()
    xla = next(s for p, s in manager.registrations("drivetrain_register_platforms") if s.name == "xla")
    assert (xla.multi_process_type, xla.single_process_type, xla.communication) == ("XLA", "XLA", "torch_distributed")
    record = manager.records["xla"]
    if not HAS_XLA:
        assert record.status is PluginStatus.UNAVAILABLE
        assert record.install == "pip install 'drivetrain[xla]'"


@pytest.mark.skipif(HAS_XLA, reason="torch_xla is installed here")
def test_selection_and_config_name_the_install_command():
    with pytest.raises(PluginSelectionError, match=r"platform 'xla' \(plugin 'xla'\) cannot be used: .*drivetrain\[xla\]"):
        select(get_plugin_manager(), Requests(platform="xla"), cluster=ClusterEnvironment("t"))
    with pytest.raises(ConfigError, match=r"key 'downcast_bf16' belongs to plugin 'xla'"):
        config_from_dict({"downcast_bf16": "yes"})
    defaults = config_from_dict({"downcast_bf16": "no", "tpu_env": [], "tpu_use_sudo": False, "tpu_name": None})
    assert defaults.get("downcast_bf16") == "no" and defaults.get("tpu_env") == []
