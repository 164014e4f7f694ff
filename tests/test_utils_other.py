"""Behaviour of the module, state-dict and object helpers of ``drivetrain.utils``."""

from __future__ import annotations

import pytest
import torch

from drivetrain.utils import (
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
    WEIGHTS_NAME,
    clean_state_dict_for_safetensors,
    compile_regions,
    convert_bytes,
    extract_model_from_parallel,
    get_module_children_bottom_up,
    get_pretty_name,
    has_compiled_regions,
    is_compiled_module,
    load,
    merge_dicts,
    recursive_getattr,
    save,
)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.linear(x))


class Tower(torch.nn.Module):
    def __init__(self, depth=3):
        super().__init__()
        self.embed = torch.nn.Linear(4, 4)
        self.layers = torch.nn.ModuleList(Block() for _ in range(depth))
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def test_constants_are_the_ecosystem_file_names():
    assert (WEIGHTS_NAME, SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME) == (
        "pytorch_model.bin", "model.safetensors", "model.safetensors.index.json")


def test_merge_dicts_is_recursive():
    destination = {"a": {"x": 1, "y": 2}, "b": 1}
    assert merge_dicts({"a": {"y": 3, "z": 4}, "c": 5}, destination) is destination
    assert destination == {"a": {"x": 1, "y": 3, "z": 4}, "b": 1, "c": 5}


def test_recursive_getattr_and_pretty_names():
    tower = Tower()
    assert recursive_getattr(tower, "layers.1.linear") is tower.layers[1].linear
    with pytest.raises(AttributeError):
        recursive_getattr(tower, "layers.nothing")
    assert get_pretty_name(Tower) == "Tower" and get_pretty_name(tower) == "Tower"
    assert get_pretty_name(test_merge_dicts_is_recursive) == "test_merge_dicts_is_recursive"


@pytest.mark.parametrize("size,text", [(100, "100 bytes"), (1536, "1.5 KB"), (3 * 1024**3, "3.0 GB"),
                                       (2 * 1024**5, "2.0 PB")])
def test_convert_bytes(size, text):
    assert convert_bytes(size) == text


def test_children_bottom_up():
    tower = Tower(depth=2)
    order = get_module_children_bottom_up(tower, return_fqns=True)
    names = [name for name, _module in order]
    assert names[-1] == "" and order[-1][1] is tower
    assert names.index("layers.0.linear") < names.index("layers.0") < names.index("layers")
    assert len(get_module_children_bottom_up(tower)) == len(list(tower.modules()))


def test_clean_state_dict_keeps_tied_tensors_once_and_contiguous(caplog):
    shared = torch.randn(3, 4)
    state = {"a": shared, "b": shared, "c": torch.randn(4, 3).t(), "n": 3}
    cleaned = clean_state_dict_for_safetensors(state)
    assert set(cleaned) == {"a", "c", "n"} and cleaned["c"].is_contiguous()
    assert torch.equal(cleaned["c"], state["c"]) and "b" in caplog.text
    assert len(caplog.records) == 1 and "Removed shared tensor" in caplog.text


def test_save_and_load(tmp_path):
    state = {"w": torch.arange(6.0).reshape(2, 3)}
    save(state, tmp_path / "plain.bin")
    save(state, tmp_path / "safe.safetensors", safe_serialization=True)
    assert torch.equal(load(tmp_path / "plain.bin")["w"], state["w"])
    from safetensors.torch import load_file

    assert torch.equal(load_file(tmp_path / "safe.safetensors")["w"], state["w"])

    torch.save({"x": Tower}, tmp_path / "code.bin")
    with pytest.raises(Exception):
        load(tmp_path / "code.bin")  # weights_only by default: no code is run
    from drivetrain.errors import CheckpointError

    with pytest.raises(CheckpointError, match=r"reads only tensors and plain data .*call torch.load yourself"):
        load(tmp_path / "code.bin", weights_only=False)


def test_extract_model_from_parallel_peels_data_parallel_and_compile():
    tower = Tower()
    assert extract_model_from_parallel(torch.nn.DataParallel(tower)) is tower
    compiled = torch.compile(tower)
    assert is_compiled_module(compiled) and not is_compiled_module(tower)
    assert extract_model_from_parallel(compiled, keep_torch_compile=False) is tower
    assert extract_model_from_parallel(compiled) is compiled


@pytest.mark.slow
def test_compile_regions_compiles_each_repeated_block():
    torch.manual_seed(0)
    tower = Tower()
    regional = compile_regions(tower, backend="eager")
    assert has_compiled_regions(regional) and not has_compiled_regions(tower) and regional._orig_mod is tower
    assert all(is_compiled_module(layer) for layer in regional.layers)
    assert not is_compiled_module(regional.embed) and regional.embed is tower.embed
    x = torch.randn(2, 4)
    assert torch.allclose(regional(x), tower(x))
    # a model without repeated blocks is compiled whole
    assert is_compiled_module(compile_regions(torch.nn.Linear(2, 2), backend="eager"))


@pytest.mark.slow
def test_compile_regions_binds_instance_methods_to_the_copy():
    """A forward installed on the instance (as wrappers do) runs on the compiled copy, not on
    the original it was bound to."""
    from types import MethodType

    calls = []

    def logged_forward(self, x):
        calls.append(self)
        return type(self).forward(self, x)

    tower = Tower()
    tower.forward = MethodType(logged_forward, tower)
    tower.layers.describe = MethodType(lambda self: self, tower.layers)
    regional = compile_regions(tower, backend="eager")
    assert regional.__dict__["forward"].__self__ is regional and tower.__dict__["forward"].__self__ is tower
    assert regional.layers.describe() is regional.layers and tower.layers.describe() is tower.layers
    x = torch.randn(2, 4)
    assert torch.allclose(regional(x), tower(x)) and calls == [regional, tower]
