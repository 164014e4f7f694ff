"""Launched on 2 CPU processes: DeepSpeed's Ulysses sequence parallelism (sp_size=2) under the
deepspeed strategy trains exactly as one process that sees whole sequences.

Each process reads its own batch; DeepSpeed's adapter gathers the two batches and hands each
process its half of one, then of the other. Each process's loss is its share of the mean over
the whole sequence (its token-loss sum over the pair's token count): DeepSpeed sums gradients
over a sequence-parallel group. For every step (SGD with momentum at lr=0.1, DeepSpeed clipping
at 1.0), the pair's loss equals the loss of one process on the whole sequence, and the pair's
weights after the step equal that process's weights. The Ulysses attention is the prepared
model's own: the reference model in the same process keeps plain sdpa.

With the argument ``recipe`` (launched with a config file: ``distributed_type: DEEPSPEED`` and a
``parallelism_config:`` block) the script follows Accelerate's sequence-parallelism guide as
written: no ``deepspeed_plugin=`` in code, the group from ``accelerator.torch_device_mesh["sp"]``,
the per-process losses gathered with ``torch.distributed.nn.functional.all_gather`` and weighted
by their token counts. That mesh group holds the ranks of DeepSpeed's sequence-parallel group;
the reported loss equals one process's loss on the whole sequence, and the gradients are
sp_size × that process's (each process backpropagates the whole loss, then DeepSpeed sums over
the group): with plain SGD and no clipping, the engine's global gradient norm is 2 × the
reference's and each step moves the weights 2 × as far.

On 4 processes, :func:`mesh_layout` (called by ``check_parallelism.py``, in its launch of 4)
checks each process's ``sp`` and ``dp`` mesh groups against DeepSpeed's sequence-parallel group
and the data-parallel replicas.

Several checks share one launch (processes cost seconds to start): ``code recipe`` runs the
in-code check (the default when no argument is given), then the recipe, the state reset
between them. The in-code plugin and layout take precedence over the config file's.
"""

from __future__ import annotations

import copy
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from drivetrain import Accelerator
from drivetrain.utils import DeepSpeedPlugin, DeepSpeedSequenceParallelConfig, ParallelismConfig

VOCAB, SEQ, LR, MOMENTUM, CLIP = 64, 16, 0.1, 0.9, 1.0


def token_loss_sum(model, batch):
    logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB).float(), batch["shift_labels"].reshape(-1),
                                             ignore_index=-100, reduction="sum")


def model_reference_and_loader():
    """A tiny Llama, its copy (one process on whole sequences) and 4 sequences, the same on every process."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                         attn_implementation="sdpa")
    model = LlamaForCausalLM(config)
    ids = torch.randint(0, VOCAB, (4, SEQ))
    rows = [{"input_ids": ids[i], "labels": ids[i], "position_ids": torch.arange(SEQ)} for i in range(4)]
    return model, copy.deepcopy(model), torch.utils.data.DataLoader(rows, batch_size=1)


def main() -> None:
    model, reference, loader = model_reference_and_loader()
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=LR, momentum=MOMENTUM)

    layout = ParallelismConfig(sp_size=2, sp_handler=DeepSpeedSequenceParallelConfig(sp_attn_implementation="sdpa"))
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=1, gradient_clipping=CLIP),
                              parallelism_config=layout)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    initial = model.model.embed_tokens.weight.detach().clone()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert accelerator.distributed_type == "DEEPSPEED", accelerator.distributed_type
    # the swap is the prepared model's: the reference in this process still runs plain sdpa
    attention = model.module.config._attn_implementation
    assert attention == "drivetrain_ulysses_sdpa", attention
    assert reference.config._attn_implementation == "sdpa"
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

        count = (batch["shift_labels"] != -100).sum()
        torch.distributed.all_reduce(count, group=group)
        # this process's share of the mean over the whole sequence: the engine sums the shares'
        # gradients over the group (DeepSpeed's sequence-data-parallel reduction)
        share = token_loss_sum(model, batch) / count
        accelerator.backward(share)  # through the all-to-all's backward
        optimizer.step()
        optimizer.zero_grad()
        loss = share.detach().clone()
        torch.distributed.all_reduce(loss, group=group)

        reference_optimizer.zero_grad()
        expected = reference(input_ids=whole.to(reference.device), labels=whole.to(reference.device)).loss
        expected.backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), CLIP)
        reference_optimizer.step()
        assert torch.allclose(loss.cpu(), expected.detach().cpu(), atol=1e-5), (rank, steps, loss, expected)
        for (name, value), expected_value in zip(model.module.named_parameters(), reference.parameters()):
            diff = (value.detach().cpu() - expected_value.detach().cpu()).abs().max().item()
            assert diff <= 1e-5, f"process {rank}, step {steps}: {name} differs from one process's by {diff}"
        steps += 1
    assert steps == 4, steps  # 2 batches per process, each split over the pair: 4 steps of half sequences
    moved = (model.module.model.embed_tokens.weight.detach().cpu() - initial).abs().max().item()
    assert moved > 1e-3, moved  # the steps did change the weights
    accelerator.print(f"loss of the last step {loss.item():.5f} (one process {expected.item():.5f})")
    accelerator.print("CHECK-SEQUENCE-PARALLEL-OK")


def recipe() -> None:
    sp_size = 2
    model, reference, loader = model_reference_and_loader()
    # the recipe's gradients are sp_size × the whole sequence's: the same step at sp_size × lr
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=LR * sp_size)

    # the strategy and the DeepSpeed options come from the launcher's config file
    accelerator = Accelerator(parallelism_config=ParallelismConfig(
        sp_backend="deepspeed", sp_size=sp_size, dp_shard_size=1,
        sp_handler=DeepSpeedSequenceParallelConfig(sp_seq_length_is_variable=True, sp_attn_implementation="sdpa")))
    assert accelerator.distributed_type == "DEEPSPEED", accelerator.distributed_type
    assert accelerator.parallelism_config.sp_size == sp_size
    mesh = accelerator.torch_device_mesh
    assert mesh is accelerator.state.device_mesh
    assert "sp" in mesh.mesh_dim_names and mesh["sp"].size() == sp_size, mesh
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    from drivetrain_deepspeed.sequence_parallel import sequence_parallel_group

    sp_group = accelerator.torch_device_mesh["sp"].get_group()
    ranks = torch.distributed.get_process_group_ranks(sp_group)
    assert ranks == torch.distributed.get_process_group_ranks(sequence_parallel_group()), ranks
    assert accelerator.torch_device_mesh["dp"].size() == accelerator.num_processes // sp_size
    unwrapped = accelerator.unwrap_model(model)
    rank, steps = accelerator.process_index, 0
    for batch in loader:
        halves = [torch.empty_like(batch["input_ids"]) for _ in range(sp_size)]
        torch.distributed.all_gather(halves, batch["input_ids"].contiguous(), group=sp_group)
        whole = torch.cat(halves, dim=1)

        # Accelerate's guide, as written
        outputs = model(**batch)
        shift_labels = batch["shift_labels"]
        loss = unwrapped.loss_function(logits=outputs.logits, labels=None, shift_labels=shift_labels,
                                       vocab_size=unwrapped.config.vocab_size)
        losses_per_rank = torch.distributed.nn.functional.all_gather(loss, group=sp_group)
        good_tokens = (shift_labels != -100).view(-1).sum()
        good_tokens_per_rank = torch.distributed.nn.functional.all_gather(good_tokens, group=sp_group)
        total_loss = sum(losses_per_rank[r] * good_tokens_per_rank[r] for r in range(sp_size)
                         if good_tokens_per_rank[r] > 0)
        loss = total_loss / max(sum(good_tokens_per_rank), 1)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        norm = float(model.get_global_grad_norm())

        reference_optimizer.zero_grad()
        expected = reference(input_ids=whole.to(reference.device), labels=whole.to(reference.device)).loss
        expected.backward()
        expected_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), float("inf")).item()
        reference_optimizer.step()
        assert torch.allclose(loss.detach().cpu(), expected.detach().cpu(), atol=1e-5), (rank, steps, loss, expected)
        assert abs(norm - sp_size * expected_norm) <= 1e-4 * expected_norm, (rank, steps, norm, expected_norm)
        for (name, value), expected_value in zip(model.module.named_parameters(), reference.parameters()):
            diff = (value.detach().cpu() - expected_value.detach().cpu()).abs().max().item()
            assert diff <= 1e-5, f"process {rank}, step {steps}: {name} differs from one process's by {diff}"
        steps += 1
    assert steps == 4, steps
    accelerator.print(f"loss of the last step {loss.item():.5f} (one process {expected.item():.5f}); "
                      f"grad norm {norm:.5f} = {sp_size} × {expected_norm:.5f}")
    accelerator.print("CHECK-SEQUENCE-PARALLEL-RECIPE-OK")


def mesh_layout(dp_dimension: str) -> None:
    """On 4 processes: each process's mesh groups against DeepSpeed's, for sp × dp_shard and sp × dp_replicate."""
    model, _reference, loader = model_reference_and_loader()
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=1),
                              parallelism_config=ParallelismConfig(sp_size=2, **{f"{dp_dimension}_size": 2}))
    accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=LR), loader)
    from drivetrain_deepspeed.sequence_parallel import sequence_parallel_group

    mesh, rank = accelerator.torch_device_mesh, accelerator.process_index
    ranks = torch.distributed.get_process_group_ranks
    assert mesh.mesh_dim_names == ("dp_replicate", "dp_shard", "sp") and mesh[dp_dimension].size() == 2, mesh
    assert ranks(mesh["sp"].get_group()) == ranks(sequence_parallel_group()) == [rank - rank % 2, rank - rank % 2 + 1]
    # the data-parallel replicas: the processes holding the same slice of different batches
    assert ranks(mesh["dp"].get_group()) == ranks(mesh[dp_dimension].get_group()) == [rank % 2, rank % 2 + 2]
    accelerator.print(f"CHECK-SEQUENCE-PARALLEL-MESH-OK {dp_dimension}")


def reset() -> None:
    from drivetrain.state import AcceleratorState, GradientState

    AcceleratorState._reset_state()
    GradientState._reset_state()


if __name__ == "__main__":
    for index, check in enumerate(sys.argv[1:] or ["code"]):
        if index:
            reset()
        {"code": main, "recipe": recipe}[check]()
