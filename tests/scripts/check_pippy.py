"""Launched on 2 processes: prepare_pippy gives the outputs of the whole model run on one."""

import copy

import torch
from torch import nn

from drivetrain import PartialState, prepare_pippy
from drivetrain.errors import ConfigError


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(4))
        self.head = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for layer in self.layers:
            x = x + layer(x)
        return self.head(x)


def main() -> None:
    state = PartialState()
    torch.manual_seed(0)  # the same weights and inputs on every process
    model = Stack().eval()
    inputs = torch.randn(8, 16)
    with torch.no_grad():
        expected = model(inputs)

    # Split points chosen by size ("auto"), output on the last process only.
    piped = prepare_pippy(copy.deepcopy(model), example_args=(inputs,), no_split_module_classes=["Sequential"])
    assert len(piped.hf_split_points) == 1 and piped.hf_split_points[0].startswith("layers."), piped.hf_split_points
    with torch.no_grad():
        output = piped(inputs)
    if state.process_index == state.num_processes - 1:
        assert torch.allclose(output, expected, atol=1e-6), (output - expected).abs().max()
    else:
        assert output is None

    # Explicit split point, 4 microbatches, output on every process.
    piped = prepare_pippy(copy.deepcopy(model), split_points=["layers.2"], example_args=(inputs,), num_chunks=4,
                          gather_output=True)
    with torch.no_grad():
        output = piped(inputs)
    assert torch.allclose(output, expected, atol=1e-6), (output - expected).abs().max()

    # Accelerate's convention: the example is ONE microbatch, the call is num_chunks of them;
    # the pipeline traced at prepare time serves it, nothing is traced again.
    piped = prepare_pippy(copy.deepcopy(model), split_points=["layers.2"], example_args=(inputs[:4],),
                          gather_output=True)
    traced = piped.pippy_stage
    with torch.no_grad():
        output = piped(inputs)
    assert piped.pippy_stage is traced
    assert torch.allclose(output, expected, atol=1e-6), (output - expected).abs().max()
    # Another batch size is traced once for its microbatch size, and the model still answers right.
    with torch.no_grad():
        output = piped(inputs[:2])
    assert piped.pippy_stage is not traced
    assert torch.allclose(output, expected[:2], atol=1e-6), (output - expected[:2]).abs().max()
    # A batch that does not divide into the microbatches is refused on every process before any transfer.
    try:
        piped(inputs[:3])
    except ConfigError as error:
        assert "num_chunks=2" in str(error), error
    else:
        raise AssertionError("a batch of 3 in 2 microbatches was accepted")
    print(f"pippy ok on process {state.process_index}", flush=True)


if __name__ == "__main__":
    main()
