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


@pytest.fixture
def hub(monkeypatch):
    """What the Hub answers for the next names (nothing is asked over the network)."""
    import drivetrain.commands.estimate as estimate_module

    asked = []

    def answer_with(value):
        def verify(repo, token=None):
            asked.append((repo, token))
            return value
        monkeypatch.setattr(estimate_module, "verify_on_hub", verify)
        return asked

    return answer_with


def test_a_gated_hub_model_is_an_os_error_that_says_to_log_in(hub):
    from drivetrain.errors import GatedModelError

    asked = hub("gated")
    args = estimate_command_parser().parse_args(["owner/locked-model"])
    with pytest.raises(GatedModelError, match="owner/locked-model is gated on the Hugging Face Hub.*log in") as caught:
        estimate_command(args)
    assert isinstance(caught.value, OSError) and asked == [("owner/locked-model", None)]


@pytest.mark.parametrize("library", [None, "transformers"])
def test_a_name_that_is_no_hub_repository_is_an_os_error(hub, monkeypatch, library):
    from drivetrain.errors import ModelNotFoundError

    monkeypatch.setitem(__import__("sys").modules, "timm", None)  # timm absent: nothing else can build it
    hub("repo")
    argv = ["nosuchname"] + (["--library_name", library] if library else [])
    with pytest.raises(ModelNotFoundError, match="nosuchname is not a local model folder or file, nor a repository "
                                                 "on the Hugging Face Hub") as caught:
        estimate_command(estimate_command_parser().parse_args(argv))
    assert isinstance(caught.value, OSError)


def test_without_the_hub_an_unknown_name_is_still_an_os_error_naming_the_fix(hub, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "timm", None)
    hub(None)  # offline, or huggingface_hub missing
    with pytest.raises(OSError, match="timm is not installed to build it by name"):
        estimate_command(estimate_command_parser().parse_args(["somename"]))


def test_local_models_and_classes_never_ask_the_hub(hub, tmp_path):
    asked = hub("repo")
    assert create_empty_model("test_estimate:Tiny").layer.weight.device.type == "meta"
    assert asked == []


def test_verify_on_hub_reads_the_hubs_errors(monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub.utils import GatedRepoError, RepositoryNotFoundError

    from drivetrain.commands.estimate import verify_on_hub

    def raising(error):
        def model_info(repo, token=None):
            raise error
        return model_info

    httpx = pytest.importorskip("httpx")
    response = httpx.Response(401, request=httpx.Request("GET", "https://huggingface.co/api/models/owner/name"))
    for error, expected in [(GatedRepoError("gated", response=response), "gated"),
                            (RepositoryNotFoundError("missing", response=response), "repo"),
                            (ConnectionError("offline"), None)]:
        monkeypatch.setattr(huggingface_hub, "model_info", raising(error))
        assert verify_on_hub("owner/name") == expected
    info = object()
    monkeypatch.setattr(huggingface_hub, "model_info", lambda repo, token=None: info)
    assert verify_on_hub("owner/name", "token") is info
