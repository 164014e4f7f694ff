"""Launched on 2 or 4 processes: ParallelismConfig layouts on a small transformers Llama, over gloo.

    check_parallelism.py DIRECTORY LAYOUT [LAYOUT ...]

Each LAYOUT is ``dp_replicate,dp_shard,tp`` (``1,1,2`` is TP=2; ``2,1,1`` replicas alone;
``1,2,2`` FSDP2 × TP; ``2,2,1`` HSDP). For each, in turn (the state reset between them), the same model is trained in the same
processes by plain PyTorch on the whole global batch, and must agree: loss and gradients of the
first step, weights after every step, the clipped norm. Then a checkpoint resumes exactly and
merges (in one process, with ``merge_fsdp_weights``) to the reference's weights. Also checked:
ranks, the device mesh, and that the data loader shards by data-parallel rank only.
A LAYOUT ``ulysses:dp_shard`` (or ``ulysses:dp_replicate``), on 4 processes, checks DeepSpeed's
sequence-parallel groups against the device mesh instead (``check_sequence_parallel.mesh_layout``):
the 4-process checks share one launch. Prints CHECK-PARALLELISM-OK at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM

from drivetrain import Accelerator, ParallelismConfig
from drivetrain.state import AcceleratorState, GradientState
from drivetrain.utils import merge_fsdp_weights

torch.set_num_threads(1)
VOCAB, SEQ, BATCH, STEPS, LR = 64, 16, 2, 3, 0.1


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ)
    return LlamaForCausalLM(config)


def close(a: torch.Tensor, b: torch.Tensor, what: str, tol: float = 2e-5) -> None:
    diff = (a.detach().float().cpu() - b.detach().float().cpu()).abs().max().item()
    assert diff <= tol, f"{what}: differs by {diff}"


def full(tensor: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def check_layout(directory: Path, sizes: tuple[int, int, int]) -> None:
    replicate, shard, tp = sizes
    config = ParallelismConfig(dp_replicate_size=replicate, dp_shard_size=shard, tp_size=tp)
    accelerator = Accelerator(parallelism_config=config)
    world, rank = accelerator.num_processes, accelerator.process_index
    dp_size = replicate * shard

    # ranks and mesh: ranks laid out dp_replicate, dp_shard, cp, tp (outermost first), the mesh
    # holding only the dimensions larger than 1
    mesh = accelerator.torch_device_mesh
    sized = {"dp_replicate": replicate, "dp_shard": shard, "cp": 1, "tp": tp}
    assert mesh is accelerator.state.device_mesh
    assert mesh.mesh_dim_names == tuple(name for name, size in sized.items() if size > 1), mesh.mesh_dim_names
    assert accelerator.parallelism_config is config and accelerator.is_composable_parallelism_enabled
    assert accelerator.tensor_parallel_rank == rank % tp
    assert accelerator.data_parallel_rank == rank // tp
    assert accelerator.data_parallel_shard_rank == (rank // tp) % shard
    assert accelerator.context_parallel_rank == 0 and accelerator.pipeline_parallel_rank == 0
    with accelerator.maybe_context_parallel(buffers=[torch.zeros(1, 4)], buffer_seq_dims=[1]):
        pass  # no cp dimension: a no-op

    reference = tiny_llama()
    model = tiny_llama()
    # SGD with momentum: linear in the gradients (Adam turns float noise in near-zero gradients into
    # whole steps), and its momentum is optimizer state that the checkpoint must carry
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)  # created before prepare: pointed at the shards
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=LR, momentum=0.9)
    torch.manual_seed(1)
    data = torch.randint(0, VOCAB, (BATCH * dp_size * (STEPS + 1), SEQ))
    torch.manual_seed(100 + rank)  # each process its own seed: the prepared loader agrees on one
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    batches = list(loader)
    # the data loader shards by data-parallel rank: tensor-parallel peers see the same batches
    mine = torch.stack(batches)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    for other in range(world):
        same_replica = other // tp == rank // tp
        assert torch.equal(every[other], mine) == same_replica, (rank, other)
    global_batches = [torch.cat([every[d * tp][step] for d in range(dp_size)]) for step in range(len(batches))]

    def reference_step(step: int) -> torch.Tensor:
        reference_optimizer.zero_grad()
        out = reference(input_ids=global_batches[step], labels=global_batches[step])
        out.loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        reference_optimizer.step()
        return out.loss.detach(), norm

    def step(index: int, check_grads: bool = False) -> torch.Tensor:
        optimizer.zero_grad()
        out = model(input_ids=batches[index], labels=batches[index])
        accelerator.backward(out.loss)
        loss = accelerator.reduce(out.loss.detach(), "mean")  # TP peers hold the same value
        if check_grads:
            reference.zero_grad()
            reference(input_ids=global_batches[index], labels=global_batches[index]).loss.backward()
            for (name, p), q in zip(model.named_parameters(), reference.parameters()):
                close(full(p.grad), q.grad, f"gradient of {name}", tol=1e-6)
        norm = accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss, norm

    def check_weights(what: str) -> None:
        state = accelerator.get_state_dict(model)
        if accelerator.is_main_process:
            for name, value in reference.state_dict().items():
                close(state[name], value, f"{what}: {name}", tol=1e-5)

    for index in range(STEPS - 1):
        loss, norm = step(index, check_grads=index == 0)
        expected_loss, expected_norm = reference_step(index)
        close(loss, expected_loss, f"loss of step {index}")
        close(norm, expected_norm, f"clipped norm of step {index}")
        check_weights(f"after step {index}")

    checkpoint = directory / f"layout_{replicate}_{shard}_{tp}"
    accelerator.save_state(checkpoint)
    saved_reference = {name: value.clone() for name, value in reference.state_dict().items()}
    last = STEPS - 1
    weights_saved = {name: full(p).detach().clone() for name, p in model.named_parameters()}
    loss_after, _ = step(last)
    weights_after = {name: full(p).detach().clone() for name, p in model.named_parameters()}
    accelerator.load_state(checkpoint)
    for name, p in model.named_parameters():
        assert torch.equal(full(p), weights_saved[name]), f"{name} not restored"
    loss_again, _ = step(last)
    assert torch.equal(loss_again, loss_after), "the resumed step differs"
    for name, p in model.named_parameters():
        assert torch.equal(full(p), weights_after[name]), f"resumed weights of {name} differ"

    # called by every process, as Accelerate's: the main process merges, the others wait for it
    written = merge_fsdp_weights(checkpoint, directory / f"merged_{replicate}_{shard}_{tp}")
    if accelerator.is_main_process:  # the single-process weights
        from safetensors.torch import load_file

        merged = load_file(directory / f"merged_{replicate}_{shard}_{tp}" / written[0])
        assert set(merged) == set(saved_reference), set(merged) ^ set(saved_reference)
        for name, value in saved_reference.items():
            close(merged[name], value, f"merged {name}", tol=1e-5)
    accelerator.wait_for_everyone()
    accelerator.print(f"layout {sizes}: loss {loss_after.item():.5f} ok")
    AcceleratorState._reset_state()
    GradientState._reset_state()


def main() -> None:
    directory = Path(sys.argv[1])
    for layout in sys.argv[2:]:
        if layout.startswith("ulysses:"):
            from check_sequence_parallel import mesh_layout

            mesh_layout(layout.partition(":")[2])
            AcceleratorState._reset_state()
            GradientState._reset_state()
            continue
        check_layout(directory, tuple(int(part) for part in layout.split(",")))
    if dist.get_rank() == 0:
        print("CHECK-PARALLELISM-OK")


if __name__ == "__main__":
    main()
