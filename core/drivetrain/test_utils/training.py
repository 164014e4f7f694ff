"""Small datasets and models for tests and example scripts (``accelerate.test_utils.training``).

Everything here is made locally from a seed: nothing is downloaded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader


class RegressionDataset:
    """``length`` samples of ``y = a * x + b`` plus a little noise, as ``{"x": ..., "y": ...}``."""

    def __init__(self, a: float = 2, b: float = 3, length: int = 64, seed: int | None = None) -> None:
        generator = np.random.default_rng(seed)
        self.length = length
        self.x = generator.normal(size=(length,)).astype(np.float32)
        self.y = (a * self.x + b + generator.normal(scale=0.1, size=(length,))).astype(np.float32)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"x": self.x[index], "y": self.y[index]}


class RegressionModel(torch.nn.Module):
    """``x * a + b`` with two scalar parameters; prints the dtypes of its first batch once."""

    def __init__(self, a: float = 0, b: float = 0, double_output: bool = False) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(float(a)))
        self.b = torch.nn.Parameter(torch.tensor(float(b)))
        self.first_batch = True

    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor:
        if self.first_batch:
            print(f"Model dtype: {self.a.dtype}, {self.b.dtype}. Input dtype: {x.dtype}")
            self.first_batch = False
        return x * self.a + self.b


class _PairDataset(torch.utils.data.Dataset):
    """Sentence-pair classification samples of random token ids (a stand-in for a GLUE task)."""

    def __init__(self, length: int, seed: int, vocab_size: int, max_length: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        lengths = torch.randint(8, max_length + 1, (length,), generator=generator)
        self.samples = []
        for size in lengths.tolist():
            ids = torch.randint(1000, vocab_size, (size,), generator=generator)
            # a label the ids decide, so a model can learn it
            self.samples.append({"input_ids": ids, "labels": int(ids.float().mean() > (vocab_size + 1000) / 2)})

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.samples[index]


class _Batch(dict):
    """Named tensors that move themselves, as a tokenizer's padded batch does: the example
    scripts call ``batch.to(accelerator.device)`` on every batch."""

    def to(self, device: Any, non_blocking: bool = False) -> "_Batch":
        for key, value in self.items():
            if isinstance(value, torch.Tensor):
                self[key] = value.to(device, non_blocking=non_blocking)
        return self


def _collate(samples: list[dict[str, Any]], pad_to: int | None, causal: bool) -> _Batch:
    width = pad_to or max(len(s["input_ids"]) for s in samples)
    input_ids = torch.zeros(len(samples), width, dtype=torch.long)
    attention_mask = torch.zeros(len(samples), width, dtype=torch.long)
    for row, sample in enumerate(samples):
        ids = sample["input_ids"][:width]
        input_ids[row, :len(ids)] = ids
        attention_mask[row, :len(ids)] = 1
    batch = _Batch(input_ids=input_ids, attention_mask=attention_mask)
    if causal:
        batch["labels"] = input_ids.masked_fill(attention_mask == 0, -100)
    else:
        batch["token_type_ids"] = torch.zeros_like(input_ids)
        batch["labels"] = torch.tensor([s["labels"] for s in samples])
    return batch


def _loaders(accelerator: Any, batch_size: int, causal: bool, vocab_size: int = 28996,
             max_length: int = 64) -> tuple[DataLoader, DataLoader]:
    train = _PairDataset(96, seed=0, vocab_size=vocab_size, max_length=max_length)
    evaluation = _PairDataset(32, seed=1, vocab_size=vocab_size, max_length=max_length)
    collate = lambda samples: _collate(samples, None, causal)  # noqa: E731
    return (DataLoader(train, shuffle=True, collate_fn=collate, batch_size=batch_size),
            DataLoader(evaluation, shuffle=False, collate_fn=collate, batch_size=batch_size))


def mocked_dataloaders(accelerator: Any, batch_size: int = 16) -> tuple[DataLoader, DataLoader]:
    """Train and evaluation loaders of a small local sentence-pair classification task, in the
    form a BERT-like model takes (``input_ids``, ``attention_mask``, ``token_type_ids``, ``labels``)."""
    return _loaders(accelerator, batch_size, causal=False)


def mocked_dataloaders_for_autoregressive_models(accelerator: Any, batch_size: int = 16) -> tuple[DataLoader, DataLoader]:
    """Train and evaluation loaders for a causal language model: ``labels`` are the input ids,
    padding masked out with -100."""
    return _loaders(accelerator, batch_size, causal=True, vocab_size=50257)


__all__ = ["RegressionDataset", "RegressionModel", "mocked_dataloaders", "mocked_dataloaders_for_autoregressive_models"]
