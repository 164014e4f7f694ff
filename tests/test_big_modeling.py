"""Big-model inference on real model code: transformers models built from small local configs
(random weights, saved sharded with save_pretrained) and a plain PyTorch model, loaded empty,
dispatched across the CPU and disk, and compared with the fully loaded model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from torch import nn

from drivetrain import (
    cpu_offload,
    cpu_offload_with_hook,
    disk_offload,
    dispatch_model,
    infer_auto_device_map,
    init_empty_weights,
    init_on_device,
    load_checkpoint_and_dispatch,
    load_checkpoint_in_model,
)
from drivetrain.errors import CheckpointError
from drivetrain.hooks import remove_hook_from_submodules
from drivetrain.utils.modeling import (
    check_tied_parameters_on_same_device,
    compute_module_sizes,
    convert_file_size_to_int,
    dtype_byte_size,
    find_tied_parameters,
    get_max_layer_size,
    get_state_dict_offloaded_model,
    has_offloaded_params,
)
from drivetrain.utils.offload import OffloadedWeightsLoader, offload_state_dict

transformers = pytest.importorskip("transformers")


class PlainNet(nn.Module):
    """A plain PyTorch model: its constructor allocates with torch.empty, and it has buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32)) for _ in range(4))
        self.norm = nn.LayerNorm(32)
        self.scale = nn.Parameter(torch.empty(32).fill_(0.5))
        self.register_buffer("offset", torch.arange(32, dtype=torch.float32) / 32)
        self.head = nn.Linear(32, 50)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(ids)
        for block in self.blocks:
            hidden = hidden + block(hidden)
        return self.head(self.norm(hidden) * self.scale + self.offset)


def _llama():
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=True)
    return config, transformers.LlamaForCausalLM


def _gpt2():
    config = transformers.GPT2Config(vocab_size=96, n_embd=48, n_layer=3, n_head=4, n_positions=64)
    return config, transformers.GPT2LMHeadModel


def _small_gpt2(n_layer: int, tied: bool) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """(a small GPT-2 in eval mode, input ids, its logits for them)."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=96, n_embd=48, n_layer=n_layer, n_head=4, n_positions=64,
                                     tie_word_embeddings=tied)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 96, (2, 6))
    with torch.no_grad():
        return model, ids, model(ids).logits


def _save(model: nn.Module, directory: Path) -> None:
    if hasattr(model, "save_pretrained"):
        model.save_pretrained(directory, max_shard_size="60KB")
    else:  # sharded by hand, in the layout save_pretrained writes
        from safetensors.torch import save_file

        names = list(model.state_dict())
        shards = [names[i::3] for i in range(3)]
        weight_map = {}
        for number, shard in enumerate(shards, 1):
            file_name = f"model-{number:05d}-of-00003.safetensors"
            save_file({n: model.state_dict()[n].contiguous() for n in shard}, directory / file_name)
            weight_map.update(dict.fromkeys(shard, file_name))
        (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


@pytest.fixture(scope="module", params=["llama", "gpt2", "plain"])
def saved(request, tmp_path_factory):
    """(build an empty-or-random model, checkpoint folder, inputs, reference logits, generated tokens)."""
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp(request.param)
    if request.param == "plain":
        def build():
            return PlainNet().eval()
        no_split: list[str] = []
    else:
        config, cls = {"llama": _llama, "gpt2": _gpt2}[request.param]()

        def build():
            return cls(config).eval()
        no_split = list(getattr(cls, "_no_split_modules", None) or [])
    model = build()
    _save(model, directory)
    ids = torch.randint(0, 40, (2, 7))
    with torch.no_grad():
        logits = _logits(model, ids)
        tokens = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                                pad_token_id=0) if hasattr(model, "generate") else None
    return {"build": build, "dir": directory, "ids": ids, "logits": logits, "tokens": tokens, "no_split": no_split,
            "name": request.param}


def _logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    out = model(ids)
    return out.logits if hasattr(out, "logits") else out


def _same_outputs(model: nn.Module, saved: dict) -> None:
    with torch.no_grad():
        assert torch.equal(_logits(model, saved["ids"]), saved["logits"])
        if saved["tokens"] is not None:
            tokens = model.generate(saved["ids"], attention_mask=torch.ones_like(saved["ids"]), max_new_tokens=4,
                                    do_sample=False, pad_token_id=0)
            assert torch.equal(tokens, saved["tokens"])


def _empty(saved: dict) -> nn.Module:
    with init_empty_weights():
        model = saved["build"]()
    assert all(p.device.type == "meta" for p in model.parameters())
    return model


def test_part_on_disk_gives_identical_outputs(saved, tmp_path):
    model = _empty(saved)
    total = compute_module_sizes(model)[""]
    device_map = infer_auto_device_map(model, max_memory={"cpu": total // 2},
                                       no_split_module_classes=saved["no_split"])
    assert "disk" in device_map.values() and "cpu" in device_map.values()
    model = load_checkpoint_and_dispatch(model, saved["dir"], device_map=device_map, offload_folder=tmp_path / "off")
    assert any(has_offloaded_params(m) for m in model.modules())
    # Disk weights of a safetensors checkpoint are read from it: nothing was copied.
    assert not list((tmp_path / "off").glob("*.dat"))
    _same_outputs(model, saved)
    # The offloaded weights still hold the values of the checkpoint.
    full = get_state_dict_offloaded_model(model)
    reference = saved["build"]()
    load_checkpoint_in_model(reference, saved["dir"])
    for name, tensor in reference.state_dict().items():
        assert torch.equal(full[name], tensor), name


def test_everything_on_disk(saved):
    model = load_checkpoint_and_dispatch(_empty(saved), saved["dir"], device_map={"": "disk"})
    assert all(p.device.type == "meta" for p in model.parameters())
    _same_outputs(model, saved)


def test_balanced_and_sequential_strategies(saved):
    for strategy in ("balanced", "sequential", "auto"):
        # Host memory only, so the result is the same on a machine with an accelerator.
        model = load_checkpoint_and_dispatch(_empty(saved), saved["dir"], device_map=strategy,
                                             max_memory={"cpu": "1GB"}, no_split_module_classes=saved["no_split"])
        assert set(model.hf_device_map.values()) <= {"cpu"}
        _same_outputs(model, saved)


def test_cpu_offload_and_disk_offload(saved, tmp_path):
    model = saved["build"]()
    load_checkpoint_in_model(model, saved["dir"])
    cpu_offload(model, execution_device="cpu")
    assert any(p.device.type == "meta" for p in model.parameters())
    _same_outputs(model, saved)

    model = saved["build"]()
    load_checkpoint_in_model(model, saved["dir"])
    disk_offload(model, tmp_path / "offload", execution_device="cpu")
    assert (tmp_path / "offload" / "index.json").exists()
    _same_outputs(model, saved)
    remove_hook_from_submodules(model)
    assert all(p.device.type == "cpu" for p in model.parameters())
    _same_outputs(model, saved)


def test_bin_checkpoint_with_dtype_goes_through_offload_folder(saved, tmp_path):
    model = saved["build"]()
    load_checkpoint_in_model(model, saved["dir"])
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    empty = _empty(saved)
    device_map = infer_auto_device_map(empty, max_memory={"cpu": compute_module_sizes(empty)[""] // 3},
                                       no_split_module_classes=saved["no_split"])
    empty = load_checkpoint_and_dispatch(empty, tmp_path, device_map=device_map, offload_folder=tmp_path / "off",
                                         dtype=torch.float64)
    assert list((tmp_path / "off").glob("*.dat"))
    with torch.no_grad():
        logits = _logits(empty, saved["ids"])
    assert logits.dtype == torch.float64
    torch.testing.assert_close(logits.float(), saved["logits"], rtol=1e-4, atol=1e-4)


def _first_shard(directory: Path) -> Path:
    return sorted(directory.glob("*.safetensors"))[0]


@pytest.mark.parametrize("damage", ["truncated", "garbage_header", "wrong_shape"])
def test_damaged_or_mismatched_shard_fails_naming_it_and_changes_nothing(saved, tmp_path, damage):
    import shutil

    directory = tmp_path / "ckpt"
    shutil.copytree(saved["dir"], directory)
    shard = sorted(directory.glob("*.safetensors"))[-1]
    if damage == "truncated":
        shard.write_bytes(shard.read_bytes()[:-100])
    elif damage == "garbage_header":
        shard.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all" + shard.read_bytes()[24:])
    else:
        from safetensors.torch import load_file, save_file

        tensors = load_file(shard)
        name = next(iter(tensors))
        tensors[name] = torch.zeros(tuple(s + 1 for s in tensors[name].shape))
        save_file(tensors, shard, metadata={"format": "pt"})
    model = saved["build"]()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=shard.name):
        load_checkpoint_in_model(model, directory)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_strict_names_missing_keys(tmp_path):
    torch.manual_seed(0)
    model = PlainNet()
    state = model.state_dict()
    del state["head.weight"]
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="head.weight"):
        load_checkpoint_in_model(PlainNet(), tmp_path, strict=True)
    load_checkpoint_in_model(PlainNet(), tmp_path)  # not strict: a warning only


def test_init_empty_weights_buffers_and_constructors():
    with init_empty_weights():
        model = PlainNet()
    assert model.scale.device.type == "meta" and model.offset.device.type == "cpu"
    assert torch.equal(model.offset, torch.arange(32, dtype=torch.float32) / 32)
    with init_empty_weights(include_buffers=True):
        model = PlainNet()
        made = torch.empty(10_000_000_000, dtype=torch.uint8)  # 10 GB: only possible on meta
    assert model.offset.device.type == "meta" and made.device.type == "meta"
    with init_on_device("cpu"):
        model = PlainNet()
    assert model.head.weight.device.type == "cpu"


def test_sizes_and_layers():
    model = PlainNet()
    sizes = compute_module_sizes(model)
    assert sizes["blocks.0"] == (32 * 64 + 64 + 64 * 32 + 32) * 4
    assert sizes[""] == sum(p.numel() * 4 for p in model.parameters()) + 32 * 4
    # a tensor is budgeted under its own name too (a module's direct parameter or buffer)
    assert (sizes["scale"], sizes["offset"], sizes["blocks.0.0.weight"]) == (32 * 4, 32 * 4, 32 * 64 * 4)
    half = compute_module_sizes(model, dtype=torch.float16)
    assert half["blocks.0"] * 2 == sizes["blocks.0"]
    size, names = get_max_layer_size(list(model.named_children()), sizes, ["Sequential"])
    assert names == ["blocks.0", "blocks.1", "blocks.2", "blocks.3"] and size == sizes["blocks.0"]
    assert convert_file_size_to_int("1KiB") == 1024 and convert_file_size_to_int("2MB") == 2_000_000
    assert convert_file_size_to_int("8kb") == 1000
    assert dtype_byte_size(torch.bfloat16) == 2 and dtype_byte_size(torch.bool) == 1 / 8


def test_tied_parameters_stay_together():
    config, cls = _llama()
    with init_empty_weights():
        model = cls(config)
    tied = find_tied_parameters(model)
    assert tied == [["lm_head.weight", "model.embed_tokens.weight"]]
    sizes = compute_module_sizes(model)
    device_map = infer_auto_device_map(model, max_memory={"cpu": sizes[""] // 3}, clean_result=False,
                                       no_split_module_classes=["LlamaDecoderLayer"])
    assert device_map["lm_head"] == device_map["model.embed_tokens"]
    check_tied_parameters_on_same_device(tied, device_map)


def test_dispatch_in_memory_model_to_disk_and_cpu_offload_pipeline(tmp_path):
    torch.manual_seed(0)
    model = PlainNet().eval()
    ids = torch.randint(0, 50, (3, 5))
    with torch.no_grad():
        expected = model(ids)
    device_map = {"embed": "cpu", "blocks.0": "cpu", "blocks.1": "disk", "blocks.2": "disk", "blocks.3": "cpu",
                  "norm": "disk", "head": "cpu", "scale": "cpu", "offset": "cpu"}
    dispatch_model(model, device_map, offload_dir=tmp_path)
    assert model.blocks[1][0].weight.device.type == "meta"
    with torch.no_grad():
        assert torch.equal(model(ids), expected)

    first, second = PlainNet().eval(), PlainNet().eval()
    with torch.no_grad():
        expected = second(first(ids).argmax(-1))
    first, hook1 = cpu_offload_with_hook(first, "cpu")
    second, hook2 = cpu_offload_with_hook(second, "cpu", prev_module_hook=hook1)
    with torch.no_grad():
        assert torch.equal(second(first(ids).argmax(-1)), expected)
    hook2.offload()
    hook1.remove()
    assert not hasattr(first, "_hf_hook")


def test_offload_index_loader_keys_are_linear(tmp_path):
    state = {f"experts.{i}.w": torch.full((2,), float(i)) for i in range(1000)}
    on_disk = {f"experts.{i}.w": torch.full((2,), float(i)) for i in range(1000, 2000)}
    offload_state_dict(tmp_path, on_disk)
    loader = OffloadedWeightsLoader(state_dict=state, save_folder=tmp_path)
    assert len(loader) == 2000 and list(loader)[:1] == ["experts.0.w"]
    assert torch.equal(loader["experts.1321.w"], torch.full((2,), 1321.0))
    assert json.loads((tmp_path / "index.json").read_text())["experts.1000.w"]["dtype"] == "float32"
    assert os.path.getsize(tmp_path / "experts.1000.w.dat") == 8


@pytest.mark.parametrize("how", ["disk_offload", "dispatch_all_disk"])
def test_offloaded_tied_embeddings_are_read_once_per_forward(tmp_path, monkeypatch, how):
    """GPT-2 with tied input/output embeddings, offloaded to disk: the tied weight is read from
    disk once per forward and both modules use that one tensor; outputs match the model in memory."""
    from drivetrain.big_modeling import disk_offload
    from drivetrain.utils.offload import OffloadedWeightsLoader

    model, ids, expected = _small_gpt2(2, tied=True)
    assert find_tied_parameters(model) == [["lm_head.weight", "transformer.wte.weight"]]
    if how == "disk_offload":
        disk_offload(model, tmp_path / "offload", execution_device="cpu")
    else:
        dispatch_model(model, {"": "disk"}, main_device="cpu", offload_dir=tmp_path / "offload")

    reads: list[str] = []
    original = OffloadedWeightsLoader.view

    def counting(self, key):
        reads.append(key)
        return original(self, key)

    monkeypatch.setattr(OffloadedWeightsLoader, "view", counting)
    seen: list[torch.Tensor] = []
    for module in (model.transformer.wte, model.lm_head):  # what each module's own forward runs with
        def watched(*args, _forward=module._old_forward, _module=module, **kwargs):
            seen.append(_module.weight)
            return _forward(*args, **kwargs)
        module._old_forward = watched
    for _ in range(2):
        reads.clear()
        seen.clear()
        with torch.no_grad():
            got = model(ids).logits
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        tied_reads = [k for k in reads if k in ("transformer.wte.weight", "lm_head.weight")]
        assert len(tied_reads) == 1, tied_reads
        assert seen[0] is seen[1]  # one loaded tensor, shared by both modules
    # Released after the forward: nothing stays loaded.
    assert model.transformer.wte.weight.device.type == "meta"
    assert model.lm_head.weight.device.type == "meta"


class BufferHeavy(nn.Module):
    """Layers with large buffers (lookup tables) next to their weights."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(6))
        for layer in self.layers:
            layer.register_buffer("table", torch.zeros(256))  # 1024 bytes, more than the weights (1088)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x) + layer.table[:16]
        return x


def test_buffers_of_offloaded_modules_leave_the_map_as_accelerate_makes_it():
    """The map is planned by sizes alone, as Accelerate's: buffers of offloaded modules (kept
    on the main device unless offload_buffers) do not move layers elsewhere. With the CPU as
    the main device there is no platform device to warn about."""
    import warnings

    model = BufferHeavy()
    layer = 16 * 16 * 4 + 16 * 4 + 256 * 4  # 2112 bytes per layer
    budget = {"cpu": 5 * layer}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = infer_auto_device_map(model, max_memory=budget)
        offloaded = infer_auto_device_map(model, max_memory=budget, offload_buffers=True)
    assert caught == []
    # The largest layer is reserved on the main device: 4 layers fit, 2 go to disk.
    assert [kept[f"layers.{i}"] for i in range(6)] == ["cpu"] * 4 + ["disk"] * 2
    assert kept == offloaded


def test_a_block_kept_in_memory_hooks_its_submodules_like_accelerate(tmp_path):
    """A block the map does not offload gets its block hook and, as in Accelerate, an
    execution-device hook on every sub-module holding weights (so inputs that reach a
    sub-module on another device are moved); removing the hooks gives the plain model back."""
    from drivetrain.hooks import AlignDevicesHook

    model, ids, expected = _small_gpt2(2, tied=False)
    dispatch_model(model, {"transformer": "cpu", "lm_head": "disk"}, main_device="cpu",
                   offload_dir=tmp_path / "offload")
    block = model.transformer
    assert isinstance(block._hf_hook, AlignDevicesHook) and block._hf_hook.place_submodules
    with_weights = [name for name, sub in block.named_modules() if name and len(sub.state_dict()) > 0]
    assert "h.0.attn.c_attn" in with_weights and "h.0" in with_weights
    for name in with_weights:
        hook = block.get_submodule(name)._hf_hook
        assert isinstance(hook, AlignDevicesHook) and hook.execution_device == "cpu" and not hook.offload, name
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, expected, rtol=0, atol=0)
    remove_hook_from_submodules(model)
    assert not any(hasattr(sub, "_hf_hook") for sub in model.modules())


def test_a_failed_forward_does_not_keep_offloaded_tied_weights(tmp_path):
    """A forward that raises leaves no tied weight loaded, and the next forward reads it again."""
    from drivetrain.big_modeling import disk_offload

    model, ids, expected = _small_gpt2(1, tied=True)
    disk_offload(model, tmp_path / "offload", execution_device="cpu")
    tied = model._hf_hook.hooks[-1].tied_params_map if hasattr(model._hf_hook, "hooks") \
        else model._hf_hook.tied_params_map
    with pytest.raises(IndexError), torch.no_grad():
        model(torch.full((1, 6), 500))  # past the vocabulary: the embedding lookup raises
    assert tied.depth == 0 and len(tied) == 0
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, expected, rtol=0, atol=0)
    assert tied.depth == 0 and len(tied) == 0


# ---------------------------------------------------------------- nothing read from outside, bad maps refused


def _plain_checkpoint(directory: Path) -> nn.Module:
    torch.manual_seed(0)
    model = PlainNet()
    directory.mkdir()
    _save(model, directory)
    return model


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_an_index_pointing_outside_its_folder_is_refused(tmp_path, where):
    directory = tmp_path / "ckpt"
    _plain_checkpoint(directory)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    index_path = directory / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shard = sorted(set(index["weight_map"].values()))[0]
    os.replace(directory / shard, elsewhere / "x.safetensors")
    target = "../elsewhere/x.safetensors" if where == "relative" else str(elsewhere / "x.safetensors")
    index["weight_map"] = {k: target if v == shard else v for k, v in index["weight_map"].items()}
    index_path.write_text(json.dumps(index))
    model = PlainNet()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=f"model.safetensors.index.json lists '{target}', outside"):
        load_checkpoint_in_model(model, directory)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_an_offload_index_naming_a_file_outside_its_folder_is_refused(tmp_path):
    folder = tmp_path / "offload"
    offload_state_dict(folder, {"w": torch.ones(3)})
    (tmp_path / "secret.dat").write_bytes(torch.zeros(3).numpy().tobytes())
    index = json.loads((folder / "index.json").read_text())
    (folder / "index.json").write_text(json.dumps({"../secret": index["w"]}))
    with pytest.raises(CheckpointError, match=r"index.json \(entry '\.\./secret'\) lists '\.\./secret\.dat', outside"):
        OffloadedWeightsLoader(save_folder=folder)
    (folder / "index.json").write_text(json.dumps({"w": dict(index["w"], dtype="load")}))
    with pytest.raises(CheckpointError, match="names the dtype 'load'"):
        OffloadedWeightsLoader(save_folder=folder)


@pytest.mark.parametrize("device_map, match", [
    ({"": "cuda:7"}, r"names device 'cuda:7', which does not exist"),
    ({"": 5}, r"names device 5, which does not exist"),
    ({"": "gpu!"}, r"names 'gpu!', which is not a device"),
])
def test_a_device_map_naming_what_does_not_exist_is_one_line(tmp_path, device_map, match):
    from drivetrain.errors import ConfigError

    directory = tmp_path / "ckpt"
    _plain_checkpoint(directory)
    model = PlainNet()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for call in (lambda: load_checkpoint_in_model(model, directory, device_map=device_map),
                 lambda: load_checkpoint_and_dispatch(model, directory, device_map=device_map),
                 lambda: dispatch_model(model, device_map)):
        with pytest.raises(ConfigError, match=match) as caught:
            call()
        assert isinstance(caught.value, ValueError)
    assert all(torch.equal(before[k], v) and v.device.type == "cpu" for k, v in model.state_dict().items())


def test_a_negative_max_memory_is_one_line(tmp_path):
    from drivetrain.errors import ConfigError

    directory = tmp_path / "ckpt"
    _plain_checkpoint(directory)
    with init_empty_weights():
        model = PlainNet()
    with pytest.raises(ConfigError, match=r"max_memory gives 'cpu' '-5GB', a negative size"):
        load_checkpoint_and_dispatch(model, directory, device_map="auto", max_memory={"cpu": "-5GB"},
                                     offload_folder=tmp_path / "off")
    with pytest.raises(ConfigError, match=r"max_memory names device 'cuda:7', which does not exist"):
        infer_auto_device_map(model, max_memory={"cuda:7": "1GB", "cpu": "1GB"})
    assert not (tmp_path / "off").exists()


def _model_with_layer_types(layer_types):
    from types import SimpleNamespace

    config = SimpleNamespace(layer_types=layer_types)
    config.get_text_config = lambda: config
    return SimpleNamespace(config=config)


def test_sequence_parallelism_refuses_layers_that_carry_a_state_along_the_sequence():
    from drivetrain.big_modeling import _refuse_recurrent_layers_under_sequence_parallelism as refuse
    from drivetrain.errors import ConfigError

    with pytest.raises(ConfigError, match="mamba, linear_attention|linear_attention, mamba"):
        refuse(_model_with_layer_types(["full_attention", "mamba", "linear_attention"]))
    refuse(_model_with_layer_types(["full_attention", "sliding_attention"]))
    refuse(nn.Linear(2, 2))  # no config at all


def test_init_empty_weights_with_buffers_leaves_nn_module_unpatched():
    register_parameter, register_buffer = nn.Module.register_parameter, nn.Module.register_buffer
    with init_empty_weights(include_buffers=True):
        assert nn.Module.register_parameter is register_parameter
        assert nn.Module.register_buffer is register_buffer
        norm = nn.BatchNorm1d(3)
    assert norm.weight.device.type == "meta" and norm.running_mean.device.type == "meta"
    assert nn.BatchNorm1d(3).weight.device.type == "cpu"


def test_checkpoint_names_the_model_lacks_are_logged_and_refused_when_strict(tmp_path, caplog):
    state = nn.Linear(3, 2).state_dict()
    state["stray"] = torch.zeros(2)
    torch.save(state, tmp_path / "weights.bin")
    model = nn.Linear(3, 2)
    with caplog.at_level("WARNING"):
        load_checkpoint_in_model(model, tmp_path / "weights.bin")
    assert any("were not used when" in r.getMessage() and "stray" in r.getMessage() for r in caplog.records)
    assert torch.equal(model.weight, state["weight"])
    with pytest.raises(RuntimeError, match="stray"):  # a CheckpointError too, as torch's strict load is a RuntimeError
        load_checkpoint_in_model(nn.Linear(3, 2), tmp_path / "weights.bin", strict=True)


def test_an_index_that_is_the_weight_map_alone_is_read(tmp_path):
    source = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    weight_map = {}
    for position in ("0", "1"):
        part = {k: v for k, v in source.state_dict().items() if k.startswith(f"{position}.")}
        torch.save(part, tmp_path / f"part{position}.bin")
        weight_map.update({k: f"part{position}.bin" for k in part})
    (tmp_path / "weights.index.json").write_text(json.dumps(weight_map))
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    load_checkpoint_in_model(model, tmp_path / "weights.index.json")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), source.state_dict().values()))


def test_offload_state_dict_keeps_the_dtype_asked_for(tmp_path):
    source = nn.Linear(3, 2)
    source.register_buffer("steps", torch.arange(4))
    torch.save(source.state_dict(), tmp_path / "weights.bin")
    model = nn.Linear(3, 2)
    model.register_buffer("steps", torch.zeros(4, dtype=torch.int64))
    load_checkpoint_in_model(model, tmp_path / "weights.bin", dtype=torch.float16, offload_state_dict=True,
                             device_map={"": "cpu"})
    assert model.weight.dtype == torch.float16 and model.steps.dtype == torch.int64
    assert torch.equal(model.weight, source.weight.detach().half()) and torch.equal(model.steps, torch.arange(4))
