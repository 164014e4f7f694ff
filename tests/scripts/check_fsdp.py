"""Launched on 2 processes: the fsdp strategy, FSDP1 and/or FSDP2 (first argument), over gloo.

    check_fsdp.py VERSIONS DIRECTORY            2 processes: training, checkpoints, options
    check_fsdp.py VERSION DIRECTORY --offload   1 process on an accelerator: CPU offload
    check_fsdp.py VERSION DIRECTORY --from-launch  options from the launcher (config file, flags)

VERSIONS is ``1``, ``2`` or ``1,2``: both versions in one launch share its start-up and its DDP
references, and each works in DIRECTORY/fsdpN. References are computed in the same processes
with plain PyTorch DDP on the same model and data. The 2-process run leaves in DIRECTORY/fsdpN a
sharded checkpoint and the full weights and outputs it expects, which the test reads back in
its own process (:func:`single_process`) and through merge-weights. Prints CHECK-FSDP-OK at the end.
"""

from __future__ import annotations

import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from drivetrain import (Accelerator, DistributedType, FullyShardedDataParallelPlugin, load_checkpoint_in_model,
                        merge_fsdp_weights)
from drivetrain.errors import ConfigError
from drivetrain.state import AcceleratorState, GradientState

torch.set_num_threads(1)
VOCAB, WIDTH, LAYERS, SEQ, BATCH = 32, 16, 2, 8, 4  # BATCH per process
STEPS = 6


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(WIDTH)
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.norm2 = torch.nn.LayerNorm(WIDTH)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(), torch.nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, length, 3, 2, width // 2).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, length, width)
        x = x + self.proj(attended)
        return x + self.mlp(self.norm2(x))


class TinyTransformer(torch.nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.position = torch.nn.Parameter(torch.randn(SEQ, WIDTH) * 0.02)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB)
        self.register_buffer("scale", torch.ones(1), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.position[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)) * self.scale


def make(seed: int = 0) -> TinyTransformer:
    torch.manual_seed(seed)
    return TinyTransformer()


def batch(step: int, rank: int, world: int) -> torch.Tensor:
    ids = torch.randint(0, VOCAB, (BATCH * world, SEQ + 1), generator=torch.Generator().manual_seed(100 + step))
    return ids[rank * BATCH:(rank + 1) * BATCH]


def loss_of(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.reshape(-1, VOCAB).float(), ids[:, 1:].reshape(-1))


def fresh(**kwargs) -> Accelerator:
    AcceleratorState._reset_state()
    GradientState._reset_state()
    return Accelerator(**kwargs)


def options(version: int, **overrides) -> FullyShardedDataParallelPlugin:
    values = dict(fsdp_version=version, auto_wrap_policy="TRANSFORMER_BASED_WRAP")
    values.update(overrides)
    return FullyShardedDataParallelPlugin(**values)


def ddp_reference(steps: int = STEPS, accumulation: int = 1) -> tuple[list[float], list[float], dict]:
    """Losses, clipped norms and final weights of plain torch DDP on the same data."""
    model = torch.nn.parallel.DistributedDataParallel(make())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    rank, world = dist.get_rank(), dist.get_world_size()
    losses, norms = [], []
    for step in range(steps):
        for micro in range(accumulation):
            context = model.no_sync() if micro < accumulation - 1 else torch.enable_grad()
            with context:
                loss = loss_of(model, batch(step * accumulation + micro, rank, world))
                (loss / accumulation).backward()
            losses.append(loss.item())
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())
        optimizer.step()
        optimizer.zero_grad()
    return losses, norms, {k: v.detach().clone() for k, v in model.module.state_dict().items()}


def train(accelerator: Accelerator, model, optimizer, steps: int, start: int = 0, scheduler=None) -> tuple[list, list]:
    losses, norms = [], []
    rank, world = accelerator.process_index, accelerator.num_processes
    for step in range(start, start + steps):
        loss = loss_of(model, batch(step, rank, world).to(accelerator.device))
        accelerator.backward(loss)
        norms.append(float(accelerator.clip_grad_norm_(model.parameters(), 1.0)))
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, norms


def close(mine: list[float], theirs: list[float], tolerance: float, what: str) -> None:
    worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(mine, theirs))
    assert len(mine) == len(theirs) and worst <= tolerance, f"{what}: {mine} vs {theirs} (worst relative {worst:.2e})"


def same_weights(state: dict, reference: dict, tolerance: float, what: str) -> None:
    assert set(state) == set(reference), f"{what}: keys differ {sorted(set(state) ^ set(reference))}"
    for key, value in reference.items():
        torch.testing.assert_close(state[key].float(), value.float(), rtol=tolerance, atol=tolerance, msg=f"{what} {key}")


# ------------------------------------------------------------------------------- checks


def check_training_matches_ddp(version: int, reference) -> None:
    ref_losses, ref_norms, ref_state = reference
    variants = [("FULL_SHARD", {}), ("SHARD_GRAD_OP", {})]
    if version == 1:
        variants.append(("FULL_SHARD", {"use_orig_params": False}))  # one FlatParameter per unit
    for strategy, extra in variants:
        accelerator = fresh(fsdp_plugin=options(version, sharding_strategy=strategy, **extra))
        assert accelerator.distributed_type == DistributedType.FSDP == "FSDP"
        plugin = accelerator.state.fsdp_plugin
        assert plugin.resolved_sharding_strategy == strategy
        # Accelerate's view: FSDP1 holds the strategy, FSDP2 reshard_after_forward
        assert (plugin.sharding_strategy, plugin.reshard_after_forward) == (
            (strategy, None) if version == 1 else (None, strategy == "FULL_SHARD"))
        assert accelerator.is_fsdp2 == (version == 2)
        model = make()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)  # created before prepare, as users do
        model, optimizer = accelerator.prepare(model, optimizer)
        if version == 1:
            assert type(model).__name__ == "FullyShardedDataParallel"
        else:
            assert type(next(model.parameters())).__name__ == "DTensor"
        local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
        total = sum(p.numel() for p in make().parameters())
        assert local < 0.7 * total, f"{strategy}: this process holds {local} of {total} parameters"
        losses, norms = train(accelerator, model, optimizer, STEPS)
        close(losses, ref_losses, 1e-4, f"v{version} {strategy} losses")
        close(norms, ref_norms, 1e-4, f"v{version} {strategy} clipped norms")
        state = accelerator.get_state_dict(model)
        if accelerator.is_main_process:
            same_weights(state, ref_state, 1e-4, f"v{version} {strategy} weights")
        unwrapped = accelerator.unwrap_model(model)
        assert isinstance(unwrapped, TinyTransformer)


def check_other_strategies_and_accumulation(version: int, reference_accumulated, directory: str) -> None:
    ref_losses, _norms, _state = reference_accumulated
    accelerator = fresh(fsdp_plugin=options(version), gradient_accumulation_steps=2)
    model = accelerator.prepare(make())
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))  # after prepare
    rank, world = accelerator.process_index, accelerator.num_processes
    losses = []
    for step in range(6):
        with accelerator.accumulate(model):
            loss = loss_of(model, batch(step, rank, world))
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
        losses.append(loss.item())
    close(losses, ref_losses, 1e-4, f"v{version} accumulation losses")
    with accelerator.accumulate(model):  # a save inside a window loads back (its gradients are lost, with a warning)
        accelerator.backward(loss_of(model, batch(6, rank, world)))
    assert not accelerator.sync_gradients
    accelerator.load_state(accelerator.save_state(os.path.join(directory, "inside-window")))
    for strategy in ("NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"):
        accelerator = fresh(fsdp_plugin=options(version, sharding_strategy=strategy))
        model = accelerator.prepare(make())
        optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))
        losses, _ = train(accelerator, model, optimizer, 2)
        assert all(math.isfinite(x) for x in losses), (strategy, losses)


def check_checkpoints_resume_exactly(version: int, directory: str) -> None:
    for kind in ("SHARDED_STATE_DICT", "FULL_STATE_DICT"):
        def build(seed: int):
            accelerator = fresh(fsdp_plugin=options(version, state_dict_type=kind))
            model = make(seed)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.9)
            return (accelerator, *accelerator.prepare(model, optimizer, scheduler))

        accelerator, model, optimizer, scheduler = build(0)
        train(accelerator, model, optimizer, 3, scheduler=scheduler)
        # The sharded checkpoint is saved without blocking: training goes on while DCP writes
        # it, and it must hold the state at the call.
        sharded = kind == "SHARDED_STATE_DICT"
        path = accelerator.save_state(os.path.join(directory, f"resume-{kind}"), blocking=not sharded)
        if sharded:
            expected, _ = train(accelerator, model, optimizer, 3, start=3, scheduler=scheduler)
            accelerator.wait_for_checkpoint()
        accelerator.wait_for_everyone()  # the checkpoint is in place once its commit ends
        files = sorted(os.listdir(os.path.join(path, "model_0")))
        if kind == "SHARDED_STATE_DICT":
            assert files == [".metadata", "__0_0.distcp", "__1_0.distcp"], files
            assert os.path.exists(os.path.join(path, "optimizer_0", "structure.json"))
        else:
            assert files == ["model.safetensors"], files
            assert os.path.exists(os.path.join(path, "optimizer_0", "full.json"))
        if not sharded:
            expected, _ = train(accelerator, model, optimizer, 3, start=3, scheduler=scheduler)
        expected_state = accelerator.get_state_dict(model)

        accelerator, model, optimizer, scheduler = build(seed=7)  # other weights, fresh optimizer
        accelerator.load_state(path)
        resumed, _ = train(accelerator, model, optimizer, 3, start=3, scheduler=scheduler)
        assert resumed == expected, f"v{version} {kind}: resumed {resumed} vs uninterrupted {expected}"
        state = accelerator.get_state_dict(model)
        if accelerator.is_main_process:
            same_weights(state, expected_state, 0.0, f"v{version} {kind} resumed weights")


def check_bad_checkpoints_change_nothing(version: int, directory: str) -> None:
    """Different directories per process, a damaged or evil ``.distcp`` file: one clear error, nothing changed."""
    import json
    import tempfile

    from drivetrain.checkpointing.checksums import file_digest
    from drivetrain.errors import CheckpointError

    accelerator = fresh(fsdp_plugin=options(version, state_dict_type="SHARDED_STATE_DICT"))
    model = make(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    train(accelerator, model, optimizer, 1)
    own = tempfile.mkdtemp(dir=directory)
    try:
        accelerator.save_state(own)
        raise AssertionError("save_state into a different directory on each process was not refused")
    except CheckpointError as error:
        assert "different directory on each process" in str(error), error
    path = accelerator.save_state(os.path.join(directory, "bad-distcp"))
    accelerator.wait_for_everyone()
    before = [p.detach().clone() for p in model.parameters()]
    victim = os.path.join(path, "model_0", "__1_0.distcp")
    manifest_path = os.path.join(path, "manifest.json")
    if accelerator.is_main_process:
        with open(victim, "r+b") as handle:  # damaged in place: the checksum catches it
            handle.seek(20)
            handle.write(b"\xff" * 16)
    accelerator.wait_for_everyone()
    for case in ("flipped", "evil"):
        try:
            accelerator.load_state(path)
            raise AssertionError(f"a {case} .distcp file was loaded")
        except CheckpointError as error:
            assert "__1_0.distcp" in str(error) or case == "evil", error
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())), case
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:  # garbage with a matching manifest: DCP's own reading fails
            with open(victim, "wb") as handle:
                handle.write(b"\x80\x04garbage" * 8)
            manifest = json.load(open(manifest_path))
            manifest["sizes"]["model_0/__1_0.distcp"] = os.path.getsize(victim)
            manifest["checksums"]["model_0/__1_0.distcp"] = file_digest(victim)
            json.dump(manifest, open(manifest_path, "w"))
        accelerator.wait_for_everyone()


def check_other_version_resumes(version: int, directory: str) -> None:
    """A sharded checkpoint of the other FSDP version resumes exactly (names are the same)."""
    other = 3 - version
    accelerator = fresh(fsdp_plugin=options(other, state_dict_type="SHARDED_STATE_DICT"))
    model = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    train(accelerator, model, optimizer, 2)
    path = accelerator.save_state(os.path.join(directory, f"from-fsdp{other}"))
    expected, _ = train(accelerator, model, optimizer, 2, start=2)
    accelerator = fresh(fsdp_plugin=options(version))
    model = make(9)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.load_state(path)
    resumed, _ = train(accelerator, model, optimizer, 2, start=2)
    assert resumed == expected, f"FSDP{other} checkpoint in FSDP{version}: {resumed} vs {expected}"


def check_leaves_checkpoint_for_one_process(version: int, directory: str) -> None:
    """A sharded checkpoint, plus what a 1-process load and merge-weights must reproduce."""
    from safetensors.torch import save_file

    accelerator = fresh(fsdp_plugin=options(version, state_dict_type="SHARDED_STATE_DICT"))
    model = make(3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    train(accelerator, model, optimizer, 2)
    accelerator.save_state(os.path.join(directory, "sharded"))
    accelerator.save_model(model, os.path.join(directory, "saved_model"), max_shard_size="20KB")
    state = accelerator.get_state_dict(model)
    ids = batch(99, 0, 1)
    if accelerator.is_main_process:
        plain = make(11)
        plain.load_state_dict(state)
        expected = {f"weight.{k}": v.contiguous() for k, v in state.items()}
        expected["ids"] = ids
        expected["logits"] = plain(ids[:, :-1]).detach()
        save_file(expected, os.path.join(directory, "expected.safetensors"))
        # save_model wrote several safetensors files and an index; they load into a plain model
        names = sorted(os.listdir(os.path.join(directory, "saved_model")))
        assert "model.safetensors.index.json" in names and len(names) > 2, names
        again = make(12)
        load_checkpoint_in_model(again, os.path.join(directory, "saved_model"), strict=True)
        torch.testing.assert_close(again(ids[:, :-1]), expected["logits"], rtol=0, atol=0)
    accelerator.wait_for_everyone()
    # merge_fsdp_weights called on every process (as Accelerate's scripts do): the main process
    # writes, the others wait for it and return no names; the model stays usable afterwards
    written = merge_fsdp_weights(os.path.join(directory, "sharded"), os.path.join(directory, "merged-in-run"))
    assert written == (["model.safetensors"] if accelerator.is_main_process else []), written
    assert os.path.exists(os.path.join(directory, "merged-in-run", "model.safetensors"))
    accelerator.get_state_dict(model)  # a collective: every process is still in step


def check_mixed_precision(version: int, reference) -> None:
    ref_losses = reference[0]
    accelerator = fresh(mixed_precision="bf16", fsdp_plugin=options(version))
    policy = accelerator.state.fsdp_plugin.mixed_precision_policy
    assert policy["param_dtype"] == "bfloat16", policy
    model = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    losses, _ = train(accelerator, model, optimizer, STEPS)
    close(losses, ref_losses, 5e-2, f"v{version} bf16 losses")
    assert all(p.dtype == torch.float32 for p in model.parameters())  # sharded fp32 master weights
    fp16 = fresh(mixed_precision="fp16", fsdp_plugin=options(version))
    assert type(fp16.scaler).__name__ == "ShardedGradScaler"
    model = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = fp16.prepare(model, optimizer)
    losses, _ = train(fp16, model, optimizer, 2)  # the first steps may be skipped while the scale settles
    close(losses[:1], ref_losses[:1], 5e-2, f"v{version} fp16 loss")
    assert all(math.isfinite(x) for x in losses), losses
    policy_only = fresh(fsdp_plugin=options(version, mixed_precision_policy={"param_dtype": "bf16",
                                                                              "reduce_dtype": torch.float32}))
    model = policy_only.prepare(make())
    optimizer = policy_only.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))
    losses, _ = train(policy_only, model, optimizer, 2)
    close(losses, ref_losses[:2], 5e-2, f"v{version} bf16 policy losses")


def check_sync_module_states(version: int) -> None:
    rank = dist.get_rank()
    main_weights = {k: v.clone() for k, v in make(0).state_dict().items()}  # what rank 0 builds
    for efficient in (False, True):
        accelerator = fresh(fsdp_plugin=options(version, sync_module_states=True, cpu_ram_efficient_loading=efficient))
        if efficient and rank != 0:
            with torch.device("meta"):
                model = TinyTransformer()  # no weights at all on the other processes
        else:
            model = make(rank)  # every process starts from different weights
        model = accelerator.prepare(model)
        state = accelerator.get_state_dict(model)
        if accelerator.is_main_process:
            same_weights(state, main_weights, 0.0, f"v{version} sync (efficient={efficient})")
        # the non-persistent buffer came from the main process too
        scale = model.scale if version == 2 else model.module.scale
        assert float(scale) == 1.0, float(scale)
        losses = [loss_of(model, batch(0, 0, 1)).item()]
        gathered = [None, None]
        dist.all_gather_object(gathered, losses)
        assert gathered[0] == gathered[1], gathered


def check_refusals(version: int) -> None:
    for kwargs, words in (
        (dict(cpu_offload=True), "needs an accelerator"),
        (dict(activation_checkpointing=True, auto_wrap_policy="NO_WRAP"), "NO_WRAP makes no units"),
    ):
        try:
            accelerator = fresh(fsdp_plugin=options(version, **kwargs))
            accelerator.prepare(make())
        except ConfigError as error:
            assert words in str(error), str(error)
        else:
            raise AssertionError(f"{kwargs} was accepted")
    accelerator = fresh(fsdp_plugin=options(version, transformer_cls_names_to_wrap=["NoSuchBlock"]))
    try:
        accelerator.prepare(make())
    except ConfigError as error:
        assert "NoSuchBlock" in str(error)
    else:
        raise AssertionError("an unknown layer class was accepted")


def check_activation_checkpointing_and_prefetch(version: int, reference) -> None:
    extra = dict(forward_prefetch=True, backward_prefetch="NO_PREFETCH") if version == 2 else dict(forward_prefetch=True)
    accelerator = fresh(fsdp_plugin=options(version, activation_checkpointing=True, **extra))
    model = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert any("CheckpointWrapper" in type(m).__name__ for m in model.modules())
    losses, _ = train(accelerator, model, optimizer, 3)
    close(losses, reference[0][:3], 1e-4, f"v{version} activation checkpointing losses")
    accelerator = fresh(fsdp_plugin=options(version, auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=1000))
    model = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    losses, _ = train(accelerator, model, optimizer, 3)
    close(losses, reference[0][:3], 1e-4, f"v{version} size-based wrapping losses")
    accelerator = fresh(fsdp_plugin=options(version, ignored_modules="head"))
    model = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    head = accelerator.unwrap_model(model).head.weight
    assert type(head) is torch.nn.Parameter and head.shape == (VOCAB, WIDTH), type(head)  # left whole
    losses, norms = train(accelerator, model, optimizer, 2)  # clipping sees sharded and whole parameters
    assert all(math.isfinite(x) for x in losses + norms), (losses, norms)


def single_process(version: int, directory: str) -> None:
    """1 process (the test's own): the 2-process sharded checkpoint loads, and gives the saved weights."""
    from safetensors.torch import load_file

    expected = load_file(os.path.join(directory, "expected.safetensors"))
    weights = {k.removeprefix("weight."): v for k, v in expected.items() if k.startswith("weight.")}
    accelerator = fresh(fsdp_plugin=options(version, state_dict_type="SHARDED_STATE_DICT"))
    assert accelerator.num_processes == 1 and accelerator.distributed_type == "FSDP"
    model = make(5)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.load_state(os.path.join(directory, "sharded"))
    same_weights(accelerator.get_state_dict(model), weights, 0.0, f"v{version} 1-process load")
    torch.testing.assert_close(model(expected["ids"][:, :-1]), expected["logits"], rtol=1e-6, atol=1e-6)
    exp_avg = optimizer.state_dict()["state"]
    assert exp_avg and all(float(entry["step"]) == 2 for entry in exp_avg.values()), "optimizer state was not loaded"
    train(accelerator, model, optimizer, 1, start=2)  # and training goes on


def offload(version: int) -> None:
    """1 process on an accelerator: parameters live in CPU memory, training is unchanged."""
    accelerator = fresh(fsdp_plugin=options(version))
    assert accelerator.device.type != "cpu", "run this on an accelerator"
    model = accelerator.prepare(make())
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))
    expected, _ = train(accelerator, model, optimizer, 3)
    accelerator = fresh(fsdp_plugin=options(version, cpu_offload=True))
    model = accelerator.prepare(make())
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))
    local = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
    assert all(p.device.type == "cpu" for p in local), sorted({str(p.device) for p in local})
    losses, _ = train(accelerator, model, optimizer, 3)
    close(losses, expected, 1e-4, f"v{version} offloaded losses")


def from_launch(version: int) -> None:
    """Options that `drivetrain launch` carried from its config file and command line."""
    accelerator = Accelerator()
    assert accelerator.distributed_type == "FSDP", accelerator.distributed_type
    plugin = accelerator.state.fsdp_plugin
    assert (plugin.fsdp_version, plugin.resolved_sharding_strategy, plugin.auto_wrap_policy, plugin.state_dict_type) == (
        version, "SHARD_GRAD_OP", "TRANSFORMER_BASED_WRAP", "FULL_STATE_DICT"), plugin
    model = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert sum(1 for m in model.modules() if type(m).__name__.startswith(("FSDP", "FullyShardedDataParallel"))) == 1 + LAYERS
    losses, _ = train(accelerator, model, optimizer, 2)
    assert all(math.isfinite(x) for x in losses), losses


def main() -> None:
    versions, directory = [int(v) for v in sys.argv[1].split(",")], sys.argv[2]
    if "--from-launch" in sys.argv:
        from_launch(versions[0])
        print(f"CHECK-FSDP-OK rank {dist.get_rank()}", flush=True)
        return
    if "--offload" in sys.argv:
        offload(versions[0])
        print("CHECK-FSDP-OK rank 0", flush=True)
        return
    accelerator = Accelerator()  # joins the process group for the DDP references
    reference = ddp_reference()
    reference_accumulated = ddp_reference(steps=3, accumulation=2)
    for version in versions:
        own = os.path.join(directory, f"fsdp{version}")
        os.makedirs(own, exist_ok=True)
        check_refusals(version)
        check_training_matches_ddp(version, reference)
        check_other_strategies_and_accumulation(version, reference_accumulated, own)
        check_checkpoints_resume_exactly(version, own)
        check_bad_checkpoints_change_nothing(version, own)
        check_other_version_resumes(version, own)
        check_leaves_checkpoint_for_one_process(version, own)
        check_mixed_precision(version, reference)
        check_sync_module_states(version)
        check_activation_checkpointing_and_prefetch(version, reference)
    accelerator.wait_for_everyone()
    print(f"CHECK-FSDP-OK rank {accelerator.process_index}", flush=True)


if __name__ == "__main__":
    main()
