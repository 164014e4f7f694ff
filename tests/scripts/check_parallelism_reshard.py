"""Launched on 2 processes: an ND checkpoint resumes under another layout (DCP reshards it).

    check_parallelism_reshard.py DIRECTORY

In the same processes (the state reset between Accelerators), a small transformers Llama is
trained beside a plain single-process reference on the same global batches:

1. under TP=2 (``tp_size=2``): two steps, then ``save_state(DIRECTORY/tp)``;
2. under FSDP2 (``dp_shard_size=2``), from other initial weights: ``load_state(DIRECTORY/tp)``
   restores exactly the weights and the optimizer's momentum saved under TP; one more step
   matches the reference; ``save_state(DIRECTORY/dp_shard)``;
3. under TP=2 again: ``load_state(DIRECTORY/dp_shard)`` restores exactly what FSDP2 saved,
   one more step matches the reference; ``merge_fsdp_weights`` of both checkpoints gives
   the weights saved; an optimizer of another kind is refused before anything changes.

The main process writes the reference's weights and momentum at the second save to
``DIRECTORY/reference.safetensors`` (a one-process load is checked against it by the test).
Prints CHECK-PARALLELISM-RESHARD-OK at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM

from drivetrain import Accelerator, ParallelismConfig
from drivetrain.errors import CheckpointError
from drivetrain.state import AcceleratorState, GradientState
from drivetrain.utils import merge_fsdp_weights

torch.set_num_threads(1)
VOCAB, SEQ, BATCH, LR, MOMENTUM = 64, 16, 4, 0.1, 0.9


def tiny_llama(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ)
    return LlamaForCausalLM(config)


def full(tensor: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach().cpu().clone()


def close(a: torch.Tensor, b: torch.Tensor, what: str, tol: float = 1e-5) -> None:
    diff = (a.detach().float().cpu() - b.detach().float().cpu()).abs().max().item()
    assert diff <= tol, f"{what}: differs by {diff}"


class Reference:
    """The single-process run every layout must follow: SGD with momentum on whole global batches."""

    def __init__(self) -> None:
        self.model = tiny_llama(0)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=LR, momentum=MOMENTUM)

    def step(self, batch: torch.Tensor) -> None:
        self.optimizer.zero_grad()
        self.model(input_ids=batch, labels=batch).loss.backward()
        self.optimizer.step()

    def momentum(self) -> dict[str, torch.Tensor]:
        return {name: self.optimizer.state[p]["momentum_buffer"] for name, p in self.model.named_parameters()}


class Layout:
    """One Accelerator under one layout, in these processes."""

    def __init__(self, seed: int, **sizes: int) -> None:
        self.accelerator = Accelerator(parallelism_config=ParallelismConfig(**sizes))
        self.dp_rank = self.accelerator.data_parallel_rank
        self.dp_size = self.accelerator.parallelism_config.data_parallel_size
        model = tiny_llama(seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)

    def step(self, batch: torch.Tensor) -> None:
        mine = batch.chunk(self.dp_size)[self.dp_rank].to(self.accelerator.device)  # this data-parallel rank's share
        self.optimizer.zero_grad()
        self.accelerator.backward(self.model(input_ids=mine, labels=mine).loss)
        self.optimizer.step()

    def weights(self) -> dict[str, torch.Tensor]:
        return {name: full(p) for name, p in self.model.named_parameters()}

    def momentum(self) -> dict[str, torch.Tensor]:
        state = self.optimizer.optimizer.state if hasattr(self.optimizer, "optimizer") else self.optimizer.state
        return {name: full(state[p]["momentum_buffer"]) for name, p in self.model.named_parameters()}

    def follows(self, reference: Reference, what: str) -> None:
        for (name, value), expected in zip(self.weights().items(), reference.model.parameters()):
            close(value, expected, f"{what}: weight {name}")
        for name, value in self.momentum().items():
            close(value, reference.momentum()[name], f"{what}: momentum of {name}")

    def restored(self, weights: dict[str, torch.Tensor], momentum: dict[str, torch.Tensor], what: str) -> None:
        for name, value in self.weights().items():
            assert torch.equal(value, weights[name]), f"{what}: weight {name} not restored"
        for name, value in self.momentum().items():
            assert torch.equal(value, momentum[name]), f"{what}: momentum of {name} not restored"

    def close_down(self) -> None:
        self.accelerator.wait_for_everyone()
        AcceleratorState._reset_state()
        GradientState._reset_state()


def merged(accelerator: Accelerator, checkpoint: Path, out: Path) -> dict[str, torch.Tensor] | None:
    # called by every process, as Accelerate's: the main process merges, the others wait for it
    written = merge_fsdp_weights(checkpoint, out)
    if not accelerator.is_main_process:
        return None
    from safetensors.torch import load_file

    return load_file(out / written[0])


def main() -> None:
    directory = Path(sys.argv[1])
    torch.manual_seed(1)
    batches = [torch.randint(0, VOCAB, (BATCH, SEQ)) for _ in range(4)]
    reference = Reference()

    # 1. tensor parallelism: train, save
    tp = Layout(seed=0, tp_size=2)
    for index in range(2):
        tp.step(batches[index])
        reference.step(batches[index])
    tp.follows(reference, "TP=2")
    tp.accelerator.save_state(directory / "tp")
    saved_by_tp = tp.weights(), tp.momentum()
    tp.close_down()

    # 2. FSDP2 over the same processes, other initial weights: load what TP saved
    shard = Layout(seed=7, dp_shard_size=2)
    assert not torch.equal(shard.weights()["model.embed_tokens.weight"], saved_by_tp[0]["model.embed_tokens.weight"])
    shard.accelerator.load_state(directory / "tp")
    shard.restored(*saved_by_tp, "TP=2 -> dp_shard=2")
    shard.step(batches[2])
    reference.step(batches[2])
    shard.follows(reference, "dp_shard=2 after resuming")
    shard.accelerator.save_state(directory / "dp_shard")
    saved_by_shard = shard.weights(), shard.momentum()
    if shard.accelerator.is_main_process:
        from safetensors.torch import save_file

        momentum = {f"momentum.{name}": value.contiguous() for name, value in reference.momentum().items()}
        save_file({**{k: v.contiguous() for k, v in reference.model.state_dict().items()}, **momentum},
                  directory / "reference.safetensors")
    shard.close_down()

    # 3. back to TP: load what FSDP2 saved, continue; merge both checkpoints
    tp = Layout(seed=7, tp_size=2)
    tp.accelerator.load_state(directory / "dp_shard")
    tp.restored(*saved_by_shard, "dp_shard=2 -> TP=2")
    tp.step(batches[3])
    reference.step(batches[3])
    tp.follows(reference, "TP=2 after resuming")
    for name, (weights, _momentum) in (("tp", saved_by_tp), ("dp_shard", saved_by_shard)):
        state = merged(tp.accelerator, directory / name, directory / f"merged_{name}")
        if state is not None:
            assert set(weights) <= set(state), set(weights) - set(state)
            for key, value in weights.items():
                assert torch.equal(state[key], value), f"merged {name}: {key}"
    tp.close_down()

    # an optimizer whose state has other tensors (Adam's moments for SGD's momentum) is refused, unchanged
    other = Accelerator(parallelism_config=ParallelismConfig(dp_shard_size=2))
    model = tiny_llama(3)
    model, optimizer = other.prepare(model, torch.optim.Adam(model.parameters(), lr=LR))
    before = {name: full(p) for name, p in model.named_parameters()}
    try:
        other.load_state(directory / "dp_shard")
    except CheckpointError as error:
        message = str(error)
        assert "\n" not in message and "optimizer" in message, message
    else:
        raise AssertionError("an Adam optimizer loaded SGD's state")
    for name, p in model.named_parameters():
        assert torch.equal(full(p), before[name]), f"{name} changed by a refused load"
    other.wait_for_everyone()
    if dist.get_rank() == 0:
        print(f"refused: {message}")
        print("CHECK-PARALLELISM-RESHARD-OK")


if __name__ == "__main__":
    main()
