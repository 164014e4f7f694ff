"""Process state in one process (in-process): attributes, helpers, the singletons, the enums
and the kwargs handler of the process group. The same across processes: test_launch.py."""

from __future__ import annotations

import copy
import pickle
from datetime import timedelta

import pytest
import torch

import drivetrain
from drivetrain import (
    AcceleratorState,
    ComputeEnvironment,
    DistributedType,
    GradientState,
    InitProcessGroupKwargs,
    LoggerType,
    PartialState,
    PrecisionType,
    RNGType,
)
from drivetrain.errors import ConfigError, PluginSelectionError
from drivetrain.state import _split


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "TORCHELASTIC_RUN_ID", "SLURM_PROCID",
                "DRIVETRAIN_PLATFORM", "DRIVETRAIN_MIXED_PRECISION", "ACCELERATE_MIXED_PRECISION",
                "ACCELERATE_DEBUG_MODE", "DRIVETRAIN_DEBUG_MODE"):
        monkeypatch.delenv(key, raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def test_single_process_attributes():
    state = PartialState()
    # the detected platform's first device: the CPU, or the one GPU of a GPU machine
    assert state.device.type == state.run.selection.platform.name and state.device.index in (None, 0)
    assert state.distributed_type == DistributedType.NO
    assert (state.num_processes, state.process_index, state.local_process_index) == (1, 0, 0)
    assert state.is_main_process and state.is_local_main_process and state.is_last_process
    assert state.mixed_precision == "no" and state.debug is False and state.backend is None
    assert not state.use_distributed and state.initialized
    assert PartialState().__dict__ is state.__dict__  # every instance shares one state
    state.wait_for_everyone()
    state.set_device()
    with state.main_process_first(), state.local_main_process_first():
        pass
    state.destroy_process_group()


def test_accelerate_variables_are_read(monkeypatch):
    monkeypatch.setenv("ACCELERATE_DEBUG_MODE", "yes")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    state = PartialState()
    assert state.debug is True and state.mixed_precision == "bf16"


def test_helpers_run_where_they_should():
    state = PartialState()
    calls = []
    state.on_main_process(lambda: calls.append("main"))()
    state.on_local_main_process(lambda: calls.append("local"))()
    state.on_last_process(lambda: calls.append("last"))()
    state.on_process(process_index=0)(lambda: calls.append("p0"))()
    state.on_process(lambda: calls.append("p1"), process_index=1)()
    state.on_local_process(local_process_index=0)(lambda: calls.append("l0"))()

    @state.on_main_process
    def returns():
        return 42

    assert returns() == 42 and returns.__name__ == "returns"
    assert calls == ["main", "local", "last", "p0", "l0"]
    with pytest.raises(ConfigError, match="process_index"):
        state.on_process(lambda: None)


def test_print_is_for_the_local_main_process(capsys):
    PartialState().print("hello", "there")
    assert capsys.readouterr().out == "hello there\n"


@pytest.mark.parametrize("inputs, index, padding, expected", [
    (["A", "B", "C"], 0, False, ["A", "B"]),
    (["A", "B", "C"], 1, False, ["C"]),
    (["A", "B", "C"], 1, True, ["C", "C"]),
    (("a", "b", "c", "d", "e"), 2, True, ("e", "e")),
    (list(range(7)), 3, False, [6]),
    (["x"], 2, False, ["x"]),  # fewer inputs than processes: the last one, as Accelerate does
])
def test_split_lists_and_tuples(inputs, index, padding, expected):
    parts = 4 if len(inputs) == 7 else 3 if len(inputs) in (1, 5) else 2
    assert _split(inputs, parts, index, padding) == expected


def test_split_tensors_dicts_and_datasets():
    tensor = torch.arange(10).reshape(5, 2)
    assert _split(tensor, 2, 1, False).tolist() == [[6, 7], [8, 9]]
    assert _split(tensor, 2, 1, True).tolist() == [[6, 7], [8, 9], [8, 9]]
    assert _split({"a": [1, 2, 3], "b": torch.tensor([4, 5, 6])}, 2, 0, False)["b"].tolist() == [4, 5]
    with pytest.raises(ValueError, match="same length"):
        _split({"a": [1, 2], "b": [1]}, 2, 0, False)


@pytest.mark.parametrize("parts", [1, 2])
def test_split_refuses_a_dict_of_unequal_lengths_on_any_number_of_processes(parts):
    from drivetrain.errors import ConfigError

    with pytest.raises(ConfigError, match=r"'a' has 3, 'b' has 1\): pad or trim"):
        _split({"a": [1, 2, 3], "b": [1]}, parts, 0, False)
    with pytest.raises(ConfigError, match=r"'x'.'y' has 2, 'z' has 3"):
        _split({"x": {"y": torch.zeros(2)}, "z": [1, 2, 3], "name": "kept whole"}, parts, 0, False)
    nested = _split({"x": {"y": [1, 2]}, "z": (3, 4), "name": "kept whole"}, parts, 0, False)
    assert nested == ({"x": {"y": [1]}, "z": (3,), "name": "kept whole"} if parts == 2 else
                      {"x": {"y": [1, 2]}, "z": (3, 4), "name": "kept whole"})

    class Rows:
        def __init__(self, rows):
            self.rows = list(rows)

        def __len__(self):
            return len(self.rows)

        def select(self, indices):
            return Rows(self.rows[i] for i in indices)

    assert _split(Rows("abcde"), 2, 1, True).rows == ["d", "e", "e"]
    assert _split(Rows("abcde"), 2, 1, False).rows == ["d", "e"]
    assert _split(7, 2, 1, False) == 7  # nothing to split


def test_split_a_datasets_dataset_by_rows():
    """A datasets.Dataset has a shape, and slicing it gives a dict of columns: its rows are split."""
    datasets = pytest.importorskip("datasets")

    rows = datasets.Dataset.from_list([{"k": value} for value in range(5)])
    assert _split(rows, 2, 0, False)["k"] == [0, 1, 2]
    assert _split(rows, 2, 1, False)["k"] == [3, 4]
    assert _split(rows, 2, 1, True)["k"] == [3, 4, 4]
    assert isinstance(_split(rows, 2, 1, False), datasets.Dataset)
    with PartialState().split_between_processes([1, 2, 3]) as everything:
        assert everything == [1, 2, 3]


def test_process_group_options_are_checked():
    with pytest.raises(ConfigError, match=r"unknown process-group option\(s\) \['timout'\]"):
        PartialState(timout=5)
    assert not PartialState._shared_state  # a failed start leaves nothing behind
    assert InitProcessGroupKwargs(timeout=timedelta(seconds=5)).to_kwargs() == {"timeout": timedelta(seconds=5)}
    state = PartialState(**InitProcessGroupKwargs(backend="gloo", timeout=timedelta(seconds=5)).to_kwargs())
    assert state.init_process_group_kwargs["backend"] == "gloo"


def test_a_failed_selection_leaves_no_half_made_state(monkeypatch):
    monkeypatch.setenv("DRIVETRAIN_PLATFORM", "no-such-platform")
    with pytest.raises(PluginSelectionError, match="unknown platform"):
        PartialState()
    assert not PartialState._shared_state
    monkeypatch.delenv("DRIVETRAIN_PLATFORM")
    assert PartialState().initialized


def test_accelerator_state_forwards_and_keeps_backend_plugins():
    marker = object()
    state = AcceleratorState(mixed_precision="bf16", fsdp_plugin=marker, deepspeed_plugin=None)
    assert state.mixed_precision == "bf16" and state.num_processes == 1 and state.device == PartialState().device
    assert state.fsdp_plugin is marker and state.deepspeed_plugin is None and state.megatron_lm_plugin is None
    assert AcceleratorState().__dict__ is state.__dict__ and state.initialized
    assert "Mixed precision type: bf16" in repr(state)
    with pytest.raises(ConfigError, match="already initialised with mixed_precision='bf16'"):
        AcceleratorState(mixed_precision="fp16")


def test_resetting_only_the_partial_state_makes_the_next_accelerator_state_afresh():
    marker = object()
    old = AcceleratorState(mixed_precision="bf16", fsdp_plugin=marker)
    old_run = old.run
    PartialState._reset_state()  # what scripts call between runs, leaving AcceleratorState alone
    assert not object.__new__(AcceleratorState).initialized  # looked at without building one
    state = AcceleratorState(mixed_precision="no")  # no "already initialised" error: that run is gone
    assert state.run is PartialState().run and state.run is not old_run
    assert state.mixed_precision == "no" and state.fsdp_plugin is None and state.initialized


def test_gradient_state():
    state = GradientState()
    assert state.sync_gradients and not state.end_of_dataloader and state.remainder == -1
    assert (state.num_steps, state.adjust_scheduler, state.sync_with_dataloader) == (1, False, True)
    assert state.active_dataloader is None and not state.in_dataloader

    class Loader:
        end_of_dataloader = True
        remainder = 3

    loader = Loader()
    state._add_dataloader(loader)
    assert GradientState().end_of_dataloader and GradientState().remainder == 3 and state.in_dataloader
    state._remove_dataloader(loader)
    assert state.active_dataloader is None
    GradientState(drivetrain.GradientAccumulationPlugin(num_steps=4, adjust_scheduler=False))
    assert state.num_steps == 4 and state.adjust_scheduler is False
    state._set_sync_gradients(False)
    assert not GradientState().sync_gradients


def test_enums_are_strings_and_open_to_plugins():
    assert DistributedType.MULTI_CPU == "MULTI_CPU" and isinstance(DistributedType.NO, str)
    assert DistributedType("multi_cpu") is DistributedType.MULTI_CPU  # one object per value
    assert DistributedType.MULTI_GPU == "MULTI_GPU"  # contributed by the cuda platform plugin
    assert DistributedType.XLA == "XLA"  # contributed by the xla platform plugin
    assert DistributedType("MY_NPU").name == "MY_NPU"  # a third-party platform reports its own
    assert "MULTI_GPU" in DistributedType and "NOPE" not in DistributedType
    assert DistributedType["NO"] is DistributedType.NO
    with pytest.raises(AttributeError, match="no member 'NOPE'"):
        DistributedType.NOPE
    assert pickle.loads(pickle.dumps(DistributedType.NO)) is DistributedType.NO
    assert copy.deepcopy(PrecisionType.BF16) is PrecisionType.BF16
    assert {"no", "fp16", "bf16"} <= set(PrecisionType.list())
    assert PrecisionType("FP16") == "fp16" and RNGType.TORCH == "torch" and RNGType.CUDA == "cuda"
    assert LoggerType.ALL == "all" and LoggerType.TENSORBOARD == "tensorboard"
    assert ComputeEnvironment.LOCAL_MACHINE == "LOCAL_MACHINE"
    assert f"{DistributedType.NO}" == "DistributedType.NO" and repr(DistributedType.NO) == "<DistributedType.NO: 'NO'>"


def test_public_names_are_exported():
    for name in ("PartialState", "AcceleratorState", "GradientState", "DistributedType", "PrecisionType",
                 "LoggerType", "RNGType", "ComputeEnvironment", "InitProcessGroupKwargs", "notebook_launcher",
                 "debug_launcher", "write_basic_config"):
        assert getattr(drivetrain, name) is not None, name


def test_reading_a_reset_state_names_the_reset_as_the_cause():
    state = PartialState()
    with pytest.raises(AttributeError, match="^'PartialState' object has no attribute 'nothing_such'$"):
        state.nothing_such
    PartialState._reset_state()
    with pytest.raises(AttributeError, match=r"`PartialState` object has no attribute `process_index`\. "
                                             r"This happens if `PartialState._reset_state\(\)`"):
        state.process_index
    with pytest.raises(AttributeError, match="^'PartialState' object has no attribute 'nothing_such'$"):
        state.nothing_such  # an attribute a set-up state never has: no word of the reset
    state.chosen = 3  # a reset state still takes new attributes
    assert state.chosen == 3


def test_an_accelerator_whose_state_was_reset_says_so():
    accelerator = drivetrain.Accelerator()
    with pytest.raises(AttributeError, match="^'AcceleratorState' object has no attribute 'nothing_such'$"):
        accelerator.state.nothing_such
    state = accelerator.state
    AcceleratorState._reset_state()
    # the Accelerator's property lets the state's error through instead of a generic one
    with pytest.raises(AttributeError, match=r"This happens if `AcceleratorState._reset_state\(\)`"):
        accelerator.distributed_type
    # what belongs to the process (which outlives the Accelerator) still answers, as in Accelerate
    assert accelerator.is_main_process and state.is_local_main_process and state.is_last_process
    state.wait_for_everyone()
    with state.split_between_processes([1, 2]) as share, state.main_process_first():
        assert share == [1, 2]
    state.destroy_process_group()  # no group of its own here: nothing to leave, and no error
    assert not AcceleratorState._shared_state  # answering did not set the Accelerator's state up again


@pytest.mark.usefixtures("private_group")  # a named device joins a one-process group, on NCCL on a GPU machine
def test_the_torch_device_variable_chooses_the_process_device(monkeypatch):
    platform = PartialState().platform
    PartialState._reset_state()
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", f"{platform.device_type}:3")
    chosen = []
    monkeypatch.setattr(type(platform), "set_device", lambda self, device: chosen.append(str(device)))
    assert str(PartialState().device) == f"{platform.device_type}:3" and chosen == [f"{platform.device_type}:3"]


@pytest.mark.parametrize("value, words", [("cpu:x", "is not a device;"), ("meta:0", "is not a device of this process's platform"),
                                          ("nosuchdevice:0", "is not a device of this process's platform")])
def test_a_torch_device_variable_that_cannot_be_used_is_one_line(monkeypatch, value, words):
    monkeypatch.setenv("DRIVETRAIN_TORCH_DEVICE", value)
    with pytest.raises(ConfigError, match=words):
        PartialState()
