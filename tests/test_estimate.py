"""``drivetrain estimate-memory``: sizes of a model built on the meta device, per dtype."""

from __future__ import annotations

import json

import pytest
import torch

from drivetrain.commands.estimate import create_empty_model, estimate_command, estimate_command_parser

transformers = pytest.importorskip("transformers")


def test_estimate_from_a_local_config_matches_the_real_model(tmp_path, capsys):
    config = transformers.LlamaConfig(vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, architectures=["LlamaForCausalLM"])
    config.save_pretrained(tmp_path)
    real = transformers.LlamaForCausalLM(config)
    total = sum(t.numel() * t.element_size() for t in [*real.parameters(), *real.buffers()])
    args = estimate_command_parser().parse_args([str(tmp_path), "--json", "--dtypes", "float32", "float16", "int4"])
    assert estimate_command(args) == 0
    rows = {row["dtype"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["float32"]["total_size"] == total
    assert rows["float16"]["total_size"] == total // 2 and rows["int4"]["total_size"] == total // 8
    assert rows["float32"]["training_with_adam"] == 4 * total and rows["int4"]["training_with_adam"] is None
    # Llama's decoder layers are never split: one is the largest layer.
    layer = sum(p.numel() * 4 for p in real.model.layers[0].parameters())
    assert rows["float32"]["largest_layer"] == layer and rows["float16"]["largest_layer"] == layer // 2


def test_estimate_of_a_class_prints_a_table(capsys):
    model = create_empty_model("test_estimate:Tiny")
    assert model.layer.weight.device.type == "meta"
    args = estimate_command_parser().parse_args(["test_estimate:Tiny"])
    assert estimate_command(args) == 0
    out = capsys.readouterr().out
    rows = {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")]
                                              for line in out.splitlines() if line.startswith("| "))}
    assert rows["float32"] == ["32 B", "40 B", "160 B"] and rows["int4"] == ["4 B", "5 B", "N/A"]


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 2)  # 8 parameters and a 2-element buffer: 40 bytes in fp32
        self.register_buffer("scale", torch.ones(2))
