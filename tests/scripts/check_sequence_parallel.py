"""Launched on 2 CPU processes: DeepSpeed's Ulysses sequence parallelism (sp_size=2) under the
deepspeed strategy gives the loss of one process that sees whole sequences, and backward runs through the all-to-all.

Each process reads its own batch; DeepSpeed's adapter gathers the two batches and hands each
process its half of one, then of the other. Each process's loss is its share of the mean over
the whole sequence; the pair's loss equals the loss of one process on the whole batch.
(Weights are not stepped here: how DeepSpeed scales the gradients of a sequence-parallel pair
is not checked yet.)
"""

from __future__ import annotations

import copy

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from drivetrain import Accelerator
from drivetrain.utils import DeepSpeedPlugin, DeepSpeedSequenceParallelConfig, ParallelismConfig

VOCAB, SEQ = 64, 16


def token_loss_sum(model, batch):
    logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB).float(), batch["shift_labels"].reshape(-1),
                                             ignore_index=-100, reduction="sum")


def main() -> None:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                         attn_implementation="sdpa")
    model = LlamaForCausalLM(config)
    reference = copy.deepcopy(model)
    # Ulysses replaces transformers' sdpa entry for the whole process: the reference attends eagerly
    reference.set_attn_implementation("eager")
    ids = torch.randint(0, VOCAB, (4, SEQ))
    rows = [{"input_ids": ids[i], "labels": ids[i], "position_ids": torch.arange(SEQ)} for i in range(4)]
    loader = torch.utils.data.DataLoader(rows, batch_size=1)

    layout = ParallelismConfig(sp_size=2, sp_handler=DeepSpeedSequenceParallelConfig(sp_attn_implementation="sdpa"))
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=1), parallelism_config=layout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the engine steps in backward: keep the weights
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert accelerator.distributed_type == "DEEPSPEED", accelerator.distributed_type
    from drivetrain_deepspeed.sequence_parallel import sequence_parallel_group

    group = sequence_parallel_group()
    rank = accelerator.process_index
    steps = 0
    for batch in loader:
        # the whole batch this step works on: gather the halves of the pair
        halves = [torch.empty_like(batch["input_ids"]) for _ in range(2)]
        torch.distributed.all_gather(halves, batch["input_ids"].contiguous(), group=group)
        whole = torch.cat(halves, dim=1)
        assert batch["input_ids"].shape[1] == SEQ // 2 and whole.shape[1] == SEQ

        count = torch.tensor((batch["shift_labels"] != -100).sum().item())
        torch.distributed.all_reduce(count, group=group)
        # this process's share of the mean over the whole sequence: the engine sums the shares'
        # gradients over the group (DeepSpeed's sequence-data-parallel reduction)
        share = token_loss_sum(model, batch) / count
        accelerator.backward(share)  # through the all-to-all's backward
        loss = share.detach().clone()
        torch.distributed.all_reduce(loss, group=group)
        optimizer.zero_grad()
        with torch.no_grad():
            expected = reference(input_ids=whole, labels=whole).loss  # one process, whole sequences
        assert torch.allclose(loss.detach(), expected.detach(), atol=1e-5), (rank, steps, float(loss), float(expected))
        steps += 1
    assert steps == 4, steps  # 2 batches per process, each split over the pair: 4 steps of half sequences
    accelerator.print("CHECK-SEQUENCE-PARALLEL-OK")


if __name__ == "__main__":
    main()
