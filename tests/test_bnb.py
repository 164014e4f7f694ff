"""Quantised loading through the bnb plugin, for real on bitsandbytes' CPU backend."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from drivetrain import init_empty_weights, load_checkpoint_in_model
from drivetrain.utils import BnbQuantizationConfig, has_4bit_bnb_layers, load_and_quantize_model

bnb = pytest.importorskip("bitsandbytes")


@pytest.mark.parametrize("bits", [8, 4])
def test_quantised_model_from_an_empty_one_stays_close(tmp_path, bits):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64), nn.GELU(), nn.Linear(64, 10)).eval()
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, tmp_path / "model.safetensors")
    x = torch.randn(8, 64)
    with torch.no_grad():
        expected = net(x)
    with init_empty_weights():
        empty = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64), nn.GELU(), nn.Linear(64, 10))
    config = BnbQuantizationConfig(load_in_8bit=bits == 8, load_in_4bit=bits == 4, bnb_4bit_quant_type="nf4",
                                   torch_dtype=torch.float32)
    model = load_and_quantize_model(empty, config, weights_location=tmp_path)
    kind = bnb.nn.Linear8bitLt if bits == 8 else bnb.nn.Linear4bit
    assert isinstance(model[0], kind) and isinstance(model[2], kind)
    assert type(model[4]) is nn.Linear  # the output layer stays in full precision
    assert model[0].weight.dtype == (torch.int8 if bits == 8 else torch.uint8)
    assert has_4bit_bnb_layers(model) == (bits == 4)
    with torch.no_grad():
        out = model(x).float()
    error = (out - expected).abs().max() / expected.abs().max()
    assert error < (0.05 if bits == 8 else 0.3), error


def test_config_checks():
    with pytest.raises(Exception, match="exactly one"):
        BnbQuantizationConfig(load_in_8bit=True, load_in_4bit=True)
    config = BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_compute_dtype="bf16")
    assert config.bnb_4bit_compute_dtype == torch.bfloat16 and config.torch_dtype == torch.float32
