"""A DeepSpeed engine in bf16 (or fp16) trains on float32 features, as the README example does.

Run as a script (one process): ``python check_deepspeed_inputs.py bf16``. Prints
``CHECK-DEEPSPEED-INPUTS-OK <precision>`` when every check passed.
"""

from __future__ import annotations

import sys

import torch

from drivetrain import Accelerator, DeepSpeedPlugin

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class TwoInputs(torch.nn.Module):
    """Takes a dict batch: float features, an integer mask (must stay integer)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))

    def forward(self, features: torch.Tensor, keep: torch.Tensor, extra: tuple) -> torch.Tensor:
        assert keep.dtype == torch.int64, keep.dtype
        assert extra[0].dtype == features.dtype  # nested float tensors are cast too
        return self.body(features + extra[0]) * keep.unsqueeze(-1)


def main() -> None:
    precision = sys.argv[1]
    torch.manual_seed(0)
    accelerator = Accelerator(mixed_precision=precision, deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    model = TwoInputs()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    features, labels = torch.randn(64, 8), (torch.arange(64) % 3)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(features, labels), batch_size=16)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert next(model.parameters()).dtype == DTYPES[precision]
    losses = []
    for _epoch in range(15):
        for x, y in loader:
            assert x.dtype == torch.float32  # the user's batch is not changed
            keep = torch.ones(x.shape[0], dtype=torch.int64, device=x.device)
            out = model(x, keep=keep, extra=(torch.zeros_like(x),))
            assert out.dtype == DTYPES[precision]
            loss = torch.nn.functional.cross_entropy(out.float(), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    assert sum(losses[-4:]) < 0.8 * sum(losses[:4]), losses
    # already in the model's dtype: passed through as is
    out = model(x.to(DTYPES[precision]), keep=keep, extra=(torch.zeros_like(x),))
    assert out.dtype == DTYPES[precision]
    print(f"CHECK-DEEPSPEED-INPUTS-OK {precision}", flush=True)


if __name__ == "__main__":
    main()
