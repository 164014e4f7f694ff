"""Offloaded weights streamed to their modules: files mapped once, weights read ahead within a
window, pages given back after use, a file cut short reported instead of killing the process.

Real transformers models (small, random weights, saved with save_pretrained) dispatched
across the CPU and disk, compared with the same model in memory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from drivetrain import cpu_offload, dispatch_model, disk_offload, init_empty_weights, load_checkpoint_and_dispatch
from drivetrain.errors import CheckpointError
from drivetrain.services.big_model.mapped_files import MappedFiles, drop_pages
from drivetrain.services.big_model.streaming import WeightStreamer
from drivetrain.utils.modeling import get_max_memory

transformers = pytest.importorskip("transformers")


def _llama(tmp_path: Path, layers: int = 3) -> tuple[Path, torch.nn.Module, torch.Tensor, torch.Tensor]:
    """(its saved folder, the model in memory, input ids, its logits for them)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=64, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config).eval()
    folder = tmp_path / "llama"
    model.save_pretrained(folder, max_shard_size="100KB")
    ids = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return folder, model, ids, model(ids).logits


def _empty_llama(model: torch.nn.Module) -> torch.nn.Module:
    with init_empty_weights():
        return transformers.LlamaForCausalLM(model.config).eval()


def _streamers(model: torch.nn.Module) -> list[WeightStreamer]:
    found = {}
    for module in model.modules():
        hook = getattr(module, "_hf_hook", None)
        for part in getattr(hook, "hooks", [hook]):
            streamer = getattr(part, "streamer", None)
            if streamer is not None and getattr(part, "offload", False):
                found[id(streamer)] = streamer
    return list(found.values())


def _watch_window(monkeypatch, seen: list[tuple[int, int]]) -> None:
    """Record (bytes held, window) after every take and release."""
    for name in ("take", "release"):
        original = getattr(WeightStreamer, name)

        def watched(self, key, _original=original):
            result = _original(self, key)
            seen.append((self._held, self.window_bytes))
            return result

        monkeypatch.setattr(WeightStreamer, name, watched)


def test_disk_offloaded_weights_stream_from_files_mapped_once(tmp_path, monkeypatch):
    folder, whole, ids, expected = _llama(tmp_path)
    shards = sorted(folder.glob("*.safetensors"))
    assert len(shards) > 2
    maps: list[str] = []
    original_from_file = torch.from_file
    monkeypatch.setattr(torch, "from_file", lambda path, *a, **k: maps.append(path) or original_from_file(path, *a, **k))
    held: list[tuple[int, int]] = []
    _watch_window(monkeypatch, held)

    model = load_checkpoint_and_dispatch(_empty_llama(whole), folder, device_map={"": "disk"},
                                         offload_folder=tmp_path / "offload")
    (streamer,) = _streamers(model)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(model(ids).logits, expected, rtol=0, atol=0)
    # each checkpoint file mapped once, however many weights and forwards read from it
    assert sorted(maps) == sorted(set(maps)) and set(maps) <= {str(p) for p in shards}
    # after the first forward the order is known: weights are found read ahead
    assert streamer.taken_read_ahead > 2 * streamer.taken_on_demand > 0
    # within the window: the largest offloaded module
    largest = max(p.numel() * p.element_size() for p in whole.parameters())
    assert streamer.window_bytes >= largest
    assert held and all(bytes_held <= window for bytes_held, window in held)
    # released after each forward: the model holds no weights between forwards
    assert all(p.device.type == "meta" for p in model.parameters())


def test_dispatch_with_an_offload_folder_cpu_offload_and_disk_offload_stream_too(tmp_path):
    folder, whole, ids, expected = _llama(tmp_path, layers=2)
    state = whole.state_dict()

    dispatched = _empty_llama(whole)
    dispatched.load_state_dict(state, assign=True)
    dispatch_model(dispatched, {"model.embed_tokens": "cpu", "model.layers": "disk", "model.norm": "disk",
                                "model.rotary_emb": "cpu", "lm_head": "disk"},
                   main_device="cpu", offload_dir=tmp_path / "dispatch")
    assert (tmp_path / "dispatch" / "lm_head.weight.dat").is_file()
    on_disk = _empty_llama(whole)
    on_disk.load_state_dict(state, assign=True)
    disk_offload(on_disk, tmp_path / "disk", execution_device="cpu")
    in_cpu = _empty_llama(whole)
    in_cpu.load_state_dict(state, assign=True)
    cpu_offload(in_cpu, execution_device="cpu")
    for model in (dispatched, on_disk, in_cpu):
        (streamer,) = _streamers(model)
        with torch.no_grad():
            for _ in range(2):
                torch.testing.assert_close(model(ids).logits, expected, rtol=0, atol=0)
        assert streamer.taken_read_ahead > 0, type(model)


def test_a_weights_file_cut_short_under_a_dispatched_model_is_an_error_not_a_crash(tmp_path):
    folder, whole, ids, _ = _llama(tmp_path, layers=2)
    model = load_checkpoint_and_dispatch(_empty_llama(whole), folder, device_map={"": "disk"},
                                         offload_folder=tmp_path / "offload")
    with torch.no_grad():
        model(ids)
    shard = sorted(folder.glob("*.safetensors"))[-1]
    os.truncate(shard, os.path.getsize(shard) // 2)  # in place: the mapping loses pages under it
    with pytest.raises(CheckpointError, match="was cut short .* load the checkpoint again"):
        with torch.no_grad():
            model(ids)


def _mapping_rss_kb(path: Path) -> int:
    """Resident kB of this process's mappings of ``path`` (Linux /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if len(fields) >= 5 and "-" in fields[0] and ":" not in fields[0]:
                inside = fields[-1] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_a_used_weight_gives_its_pages_back_and_reads_the_same_again(tmp_path):
    path = tmp_path / "weights.bin"
    values = torch.arange(4 * 2**20 // 4, dtype=torch.float32)
    path.write_bytes(values.numpy().tobytes())
    files = MappedFiles()
    view = files.view(path, 4096, torch.float32, [values.numel() - 2048])
    assert files.owns(view) and not files.owns(values)
    assert float(view.sum()) == float(values[1024:-1024].sum())  # reading it makes its pages resident
    assert _mapping_rss_kb(path) > 3000
    drop_pages(view)
    assert _mapping_rss_kb(path) < 100
    assert torch.equal(view, values[1024:-1024])  # faulted back from the file, unchanged
    view[0] = -1.0  # a private mapping: writing to a view never reaches the file
    assert path.read_bytes()[4096:4100] == values[1024:1025].numpy().tobytes()


def test_get_max_memory_converts_the_callers_string_sizes_in_place():
    # transformers' get_max_memory compares the caller's values with the result afterwards
    asked = {"cpu": "150MB", "disk": "2GiB"}
    result = get_max_memory(asked)
    assert asked == {"cpu": 150_000_000, "disk": 2 * 2**30}
    assert result == {"cpu": 150_000_000, "disk": 2 * 2**30}
    assert min(asked["cpu"], result["cpu"]) == 150_000_000
