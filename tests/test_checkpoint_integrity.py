"""Checkpoint integrity: checksums catch damaged files, nothing read runs code, a failed load changes nothing."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import torch

from drivetrain import Accelerator
from drivetrain.checkpointing.checksums import file_digest
from drivetrain.errors import CheckpointError

pytestmark = pytest.mark.usefixtures("fresh_state")


class Net(torch.nn.Module):
    def __init__(self, hidden=8):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 2))

    def forward(self, x):
        return self.net(x)


class Counter:
    """A registered object whose state holds a tensor."""

    def __init__(self, size=3):
        self.values = torch.zeros(size)

    def state_dict(self):
        return {"values": self.values}

    def load_state_dict(self, state):
        self.values = state["values"].clone()


class Exploit:
    """A pickle that would create ``marker`` when unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def setup(hidden=8, steps=2, seed=0):
    accelerator = Accelerator()
    torch.manual_seed(seed)
    model = Net(hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    for _ in range(steps):
        accelerator.backward(model(torch.randn(3, 4, device=accelerator.device)).sum())
        optimizer.step()
        optimizer.zero_grad()
    counter.values += steps
    return accelerator, model, optimizer, counter


def snapshot(model, optimizer, counter):
    tensors = [p.detach().clone() for p in model.parameters()]
    tensors += [v.clone() for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    return tensors + [counter.values.clone()], [g["lr"] for g in optimizer.param_groups], torch.get_rng_state()


def unchanged(before, model, optimizer, counter):
    after = snapshot(model, optimizer, counter)
    return (len(before[0]) == len(after[0]) and all(torch.equal(a, b) for a, b in zip(before[0], after[0]))
            and before[1] == after[1] and torch.equal(before[2], after[2]))


def saved(tmp_path, accelerator):
    directory = Path(accelerator.save_state(tmp_path / "c"))
    accelerator.wait_for_everyone()
    return directory


def flip(path: Path, offset_from_end: int, count: int = 16) -> None:
    data = bytearray(path.read_bytes())
    start = len(data) - offset_from_end
    for i in range(start, start + count):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_manifest_records_a_checksum_of_every_file(tmp_path):
    accelerator, *_ = setup()
    directory = saved(tmp_path, accelerator)
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["format_version"] == 3 and manifest["checksum_algorithm"] == "xxh3_128"
    assert sorted(manifest["checksums"]) == manifest["files"]
    for name, digest in manifest["checksums"].items():
        assert file_digest(directory / name) == digest, name


@pytest.mark.parametrize("victim", ["model_0/model.safetensors", "optimizer_0.safetensors"])
def test_flipped_bytes_are_an_error_naming_the_file_and_change_nothing(tmp_path, victim):
    accelerator, model, optimizer, counter = setup()
    directory = saved(tmp_path, accelerator)
    accelerator.backward(model(torch.randn(3, 4, device=accelerator.device)).sum())
    optimizer.step()
    before = snapshot(model, optimizer, counter)
    flip(directory / victim, 40)  # inside the tensor data, the header stays valid
    with pytest.raises(CheckpointError, match=f"{victim}.* does not match the checksum"):
        accelerator.load_state(directory)
    assert unchanged(before, model, optimizer, counter)


def test_an_edited_learning_rate_of_the_same_size_is_caught(tmp_path):
    accelerator, model, optimizer, counter = setup()
    directory = saved(tmp_path, accelerator)
    path = directory / "optimizer_0.json"
    text = path.read_text()
    assert '"lr": 0.01' in text
    path.write_text(text.replace('"lr": 0.01', '"lr": 0.09'))
    before = snapshot(model, optimizer, counter)
    with pytest.raises(CheckpointError, match=r"optimizer_0\.json does not match the checksum"):
        accelerator.load_state(directory)
    assert unchanged(before, model, optimizer, counter)


def test_format_2_checkpoints_without_checksums_still_load(tmp_path, caplog):
    accelerator, model, optimizer, counter = setup()
    directory = saved(tmp_path, accelerator)
    expected = [p.detach().clone() for p in model.parameters()]
    manifest = json.loads((directory / "manifest.json").read_text())
    del manifest["checksums"], manifest["checksum_algorithm"]
    # as the last writer of format 2 wrote it
    (directory / "manifest.json").write_text(json.dumps(dict(manifest, format_version=2, plugin_api_version="1.2")))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
    accelerator.load_state(directory)
    assert "manifest.json is of checkpoint format 2" in caplog.text and "without verification" in caplog.text
    assert all(torch.equal(a, b) for a, b in zip(expected, model.parameters()))
    # a format-3 manifest that lost its checksums is damaged, not old
    (directory / "manifest.json").write_text(json.dumps(dict(manifest, format_version=3)))
    with pytest.raises(CheckpointError, match="has no checksums"):
        accelerator.load_state(directory)


def test_a_different_hidden_size_changes_nothing_and_names_the_mismatch(tmp_path):
    accelerator, *_ = setup(hidden=8)
    directory = saved(tmp_path, accelerator)
    accelerator.free_memory()
    other, model, optimizer, counter = setup(hidden=16, seed=1)
    before = snapshot(model, optimizer, counter)
    with pytest.raises(CheckpointError, match=r"model_0 does not fit: net\.0\.weight is \(8, 4\) float32 in the "
                                              r"checkpoint but \(16, 4\) float32 here"):
        other.load_state(directory)
    assert unchanged(before, model, optimizer, counter)
    # non-strict loading skips missing keys but never a shape
    with pytest.raises(CheckpointError, match="does not fit"):
        other.load_state(directory, strict=False)
    assert unchanged(before, model, optimizer, counter)


def test_a_registered_object_that_does_not_fit_changes_nothing(tmp_path):
    accelerator, model, optimizer, counter = setup()
    directory = saved(tmp_path, accelerator)
    counter.values = torch.zeros(5)
    before = snapshot(model, optimizer, counter)
    with pytest.raises(CheckpointError, match=r"custom_checkpoint_0 does not fit: \['values'\] is \(3,\) float32"):
        accelerator.load_state(directory)
    assert unchanged(before, model, optimizer, counter)


def test_load_options_as_in_accelerate(tmp_path):
    accelerator, model, optimizer, counter = setup()
    directory = saved(tmp_path, accelerator)
    with pytest.raises(CheckpointError, match=r"load_state\(\) got \['strictly'\]"):
        accelerator.load_state(directory, strictly=True)
    with pytest.raises(CheckpointError, match=r"load_kwargs=...\) got \['pickle_module'\]"):
        accelerator.load_state(directory, load_kwargs={"pickle_module": pickle})
    accelerator.load_state(directory, load_kwargs={"weights_only": True, "map_location": "cpu"}, strict=True,
                           assign=True)
    assert counter.values.device.type == "cpu" and torch.equal(counter.values, torch.full((3,), 2.0))


@pytest.mark.parametrize("location", ["tpu:9", "not a device", 3.5])
def test_a_map_location_that_is_no_device_here_is_refused_before_anything_changes(tmp_path, location):
    accelerator, model, optimizer, counter = setup()
    directory = saved(tmp_path, accelerator)
    before = snapshot(model, optimizer, counter)
    with pytest.raises(CheckpointError, match=r"map_location=.*(is not a device|names a device this process does not "
                                              r"have).*: pass 'cpu', 'on_device'") as refused:
        accelerator.load_state(directory, map_location=location)
    assert "\n" not in str(refused.value) and unchanged(before, model, optimizer, counter)


def test_a_device_past_the_platforms_count_is_refused(tmp_path):
    accelerator, model, optimizer, counter = setup()
    directory = saved(tmp_path, accelerator)
    platform = accelerator.state.platform
    if platform.device_type == "cpu":  # no devices besides the host: any other type is missing
        missing = "cuda:0"
    else:
        missing = f"{platform.device_type}:{platform.device_count()}"
    with pytest.raises(CheckpointError, match="names a device this process does not have"):
        accelerator.load_state(directory, load_kwargs={"map_location": missing})
    accelerator.load_state(directory, map_location="on_device")


def test_the_safe_loader_refuses_code_and_accepts_allowed_types(tmp_path):
    from drivetrain.plugin_api import safe_torch_load

    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pt"
    torch.save({"module": {"w": torch.ones(2)}, "x": Exploit(marker)}, evil)
    with pytest.raises(CheckpointError, match=r"evil\.pt cannot be read safely"):
        safe_torch_load(evil)
    assert not marker.exists()
    with pytest.raises(CheckpointError, match="is missing"):
        safe_torch_load(tmp_path / "absent.pt")


def test_deepspeed_engine_files_are_read_through_the_safe_loader(tmp_path):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    from drivetrain_deepspeed.checkpoint import safe_loading

    class Engine:
        checkpoint_engine = TorchCheckpointEngine()

    engine = Engine()
    good = tmp_path / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    torch.save({"optimizer_state_dict": {"loss_scaler": LossScaler(1.0), "zero_stage": ZeroStageEnum.gradients,
                                         "param_slice_mappings": [{"w": fragment_address(numel=2, start=0)}],
                                         "single_partition_of_fp32_groups": [torch.ones(2)]}}, good)
    marker = tmp_path / "ran"
    evil = tmp_path / "mp_rank_00_model_states.pt"
    torch.save({"module": {"w": torch.ones(2)}, "hook": Exploit(marker)}, evil)
    with safe_loading(engine):
        state = engine.checkpoint_engine.load(str(good), map_location=lambda storage, loc: storage)
        assert state["optimizer_state_dict"]["zero_stage"] == ZeroStageEnum.gradients
        with pytest.raises(CheckpointError, match=r"mp_rank_00_model_states\.pt cannot be read safely"):
            engine.checkpoint_engine.load(str(evil), map_location="cpu")
    assert not marker.exists()
    assert isinstance(engine.checkpoint_engine, TorchCheckpointEngine)  # put back after the block


def test_save_and_save_model_honour_save_on_each_node(tmp_path, monkeypatch):
    from drivetrain import ProjectConfiguration

    accelerator = Accelerator(project_config=ProjectConfiguration(save_on_each_node=True))
    model = accelerator.prepare(Net())
    # a node's first process that is not the main one (as the session the saving reads says): it writes with
    # save_on_each_node, not without
    monkeypatch.setattr(type(accelerator.session), "is_main_process", property(lambda self: False))
    monkeypatch.setattr(type(accelerator.session), "is_local_main_process", property(lambda self: True))
    accelerator.save({"x": torch.ones(1)}, tmp_path / "obj.pt")
    accelerator.save_model(model, tmp_path / "model")
    assert (tmp_path / "obj.pt").exists() and (tmp_path / "model" / "model.safetensors").exists()
    accelerator.project_configuration.save_on_each_node = False
    accelerator.save({"x": torch.ones(1)}, tmp_path / "other.pt")
    accelerator.save_model(model, tmp_path / "other")
    assert not (tmp_path / "other.pt").exists() and not (tmp_path / "other").exists()


# ---------------------------------------------------------------- nothing read from outside, every value checked


def rewrite(directory: Path, name: str, text: str) -> None:
    """Replace a checkpoint file and record its new checksum and size, as a forger would."""
    (directory / name).write_text(text)
    edit_manifest(directory, lambda m: (m["checksums"].__setitem__(name, file_digest(directory / name)),
                                        m["sizes"].__setitem__(name, (directory / name).stat().st_size)))


def edit_manifest(directory: Path, change) -> None:
    manifest = json.loads((directory / "manifest.json").read_text())
    change(manifest)
    (directory / "manifest.json").write_text(json.dumps(manifest))


def list_file(manifest: dict, name: str, target: Path) -> None:
    manifest["files"].append(name)
    manifest["sizes"][name] = target.stat().st_size
    manifest["checksums"][name] = file_digest(target)


def refused(accelerator, directory, model, optimizer, counter, match):
    before = snapshot(model, optimizer, counter)
    with pytest.raises(CheckpointError, match=match):
        accelerator.load_state(directory)
    assert unchanged(before, model, optimizer, counter)


def test_a_manifest_naming_a_file_outside_the_checkpoint_is_refused(tmp_path):
    accelerator, model, optimizer, counter = setup()
    directory = saved(tmp_path, accelerator)
    outside = tmp_path / "secret.txt"
    outside.write_text("not yours")
    edit_manifest(directory, lambda m: list_file(m, "../secret.txt", outside))
    refused(accelerator, directory, model, optimizer, counter, r"lists '\.\./secret\.txt', outside")
    edit_manifest(directory, lambda m: (m["files"].remove("../secret.txt"), m["sizes"].pop("../secret.txt"),
                                        m["checksums"].pop("../secret.txt"), list_file(m, str(outside), outside)))
    refused(accelerator, directory, model, optimizer, counter, "outside")


def test_a_manifest_naming_a_directory_or_a_device_is_refused(tmp_path):
    accelerator, model, optimizer, counter = setup()
    directory = saved(tmp_path, accelerator)
    manifest = json.loads((directory / "manifest.json").read_text())
    edit_manifest(directory, lambda m: (m["files"].append("model_0"), m["sizes"].__setitem__("model_0", 4096)))
    refused(accelerator, directory, model, optimizer, counter, "lists 'model_0', which is not a regular file")
    (directory / "manifest.json").write_text(json.dumps(manifest))
    os.symlink("/dev/null", directory / "empty")  # a link to a device: /dev/zero would be read forever
    edit_manifest(directory, lambda m: list_file(m, "empty", Path("/dev/null")))
    refused(accelerator, directory, model, optimizer, counter, "lists 'empty', which is not a regular file")


@pytest.mark.parametrize("field, value", [("sizes", ["model_0/model.safetensors"]), ("files", "model_0"),
                                          ("checksums", "abc"), ("counts", [1, 1]), ("world_size", "2")])
def test_a_manifest_field_of_the_wrong_type_is_one_line(tmp_path, field, value):
    accelerator, model, optimizer, counter = setup()
    directory = saved(tmp_path, accelerator)
    edit_manifest(directory, lambda m: m.__setitem__(field, value))
    refused(accelerator, directory, model, optimizer, counter, f"its '{field}' is not")


def test_a_manifest_downgraded_to_format_2_is_refused(tmp_path):
    accelerator, model, optimizer, counter = setup()
    directory = saved(tmp_path, accelerator)
    flip(directory / "optimizer_0.safetensors", 40)
    edit_manifest(directory, lambda m: m.__setitem__("format_version", 2))
    refused(accelerator, directory, model, optimizer, counter, "claims checkpoint format 2 but records checksums")
    edit_manifest(directory, lambda m: (m.pop("checksums"), m.pop("checksum_algorithm")))
    refused(accelerator, directory, model, optimizer, counter, r"its writer \(plugin API .*\) writes format 3")


def test_a_forged_learning_rate_type_is_refused(tmp_path):
    accelerator, model, optimizer, counter = setup()
    directory = saved(tmp_path, accelerator)
    text = (directory / "optimizer_0.json").read_text()
    rewrite(directory, "optimizer_0.json", text.replace('"lr": 0.01', '"lr": "abc"'))
    refused(accelerator, directory, model, optimizer, counter, r"parameter group 0 is damaged: 'lr' is 'abc'")
    rewrite(directory, "optimizer_0.json", text.replace('"betas": {"__t": "tuple", "v": [0.9, 0.999]}',
                                                        '"betas": {"__t": "tuple", "v": [0.9, "x"]}'))
    refused(accelerator, directory, model, optimizer, counter, "'betas' is")


class Typed:
    """A registered object whose state holds a dtype."""

    def __init__(self):
        self.dtype = torch.float32

    def state_dict(self):
        return {"dtype": self.dtype, "values": torch.ones(2)}

    def load_state_dict(self, state):
        self.dtype = state["dtype"]


@pytest.mark.parametrize("forged, match", [
    ('{"__t": "dtype", "v": "load"}', "names the dtype 'load', which is not a torch dtype"),
    ('{"__t": "float", "v": "1e999"}', "the float '1e999'"),
    ('{"__t": "tuple", "v": 3}', "whose 'v' is not a list"),
    ('{"__t": "dict", "v": [[[1], 2]]}', "a dict key of type list"),
    ('{"__t": "ndarray", "k": "t0", "dtype": "object"}', "an array of dtype object"),
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
])
def test_forged_values_in_a_state_tree_are_refused(tmp_path, forged, match):
    accelerator, model, optimizer, counter = setup()
    typed = Typed()
    accelerator.register_for_checkpointing(typed)
    directory = saved(tmp_path, accelerator)
    text = (directory / "custom_checkpoint_1.json").read_text()
    assert '{"__t": "dtype", "v": "float32"}' in text
    rewrite(directory, "custom_checkpoint_1.json", text.replace('{"__t": "dtype", "v": "float32"}', forged))
    typed.dtype = torch.float16
    refused(accelerator, directory, model, optimizer, counter, match)
    assert typed.dtype is torch.float16


def _two_tensor_file(path: Path) -> tuple[bytes, dict]:
    from drivetrain.checkpointing.safetensors_io import write_safetensors

    write_safetensors(path, {"a": torch.ones(4), "b": torch.full((4,), 2.0)}, metadata={"format": "pt"}, fsync=False)
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    return data[8 + length:], json.loads(data[8:8 + length])


def _with_header(path: Path, header: dict, body: bytes) -> None:
    encoded = json.dumps(header).encode()
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + body)


@pytest.mark.parametrize("reader", ["read_safetensors", "safetensors_entries"])
@pytest.mark.parametrize("damage, match", [
    ("overlap", "tensor 'b' overlaps another one"),
    ("deep_metadata", "nested too deeply"),
    ("metadata_not_strings", "__metadata__ is not a mapping of strings"),
    ("float_offsets", "bad entry for tensor 'a'"),
])
def test_a_damaged_safetensors_header_is_one_line(tmp_path, reader, damage, match):
    from drivetrain.checkpointing.safetensors_io import read_safetensors
    from drivetrain.utils.offload import safetensors_entries

    path = tmp_path / "x.safetensors"
    body, header = _two_tensor_file(path)
    if damage == "overlap":  # b reads a's bytes, the file keeps its size
        header["b"]["data_offsets"] = header["a"]["data_offsets"]
    elif damage == "deep_metadata":
        header["__metadata__"] = {"format": "pt"}
        _with_header(path, header, body)
        text = path.read_bytes()
        length = int.from_bytes(text[:8], "little")
        deep = text[8:8 + length].replace(b'"pt"', b"[" * 100000 + b"]" * 100000)
        path.write_bytes(len(deep).to_bytes(8, "little") + deep + body)
    elif damage == "metadata_not_strings":
        header["__metadata__"] = {"format": {"nested": 1}}
    else:
        header["a"]["data_offsets"] = [0.0, 16.0]
    if damage != "deep_metadata":
        _with_header(path, header, body)
    read = read_safetensors if reader == "read_safetensors" else safetensors_entries
    with pytest.raises(CheckpointError, match=match):
        read(path)
