"""``drivetrain merge-weights``: a sharded FSDP checkpoint turned into one model file.

Runs in one process, without the processes (or the number of them) that wrote the
checkpoint: ``torch.distributed.checkpoint`` reads every shard of every tensor into whole
tensors, which are written as ``model.safetensors`` (or ``pytorch_model.bin``).
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path
from typing import Any

from drivetrain.plugin_api import CheckpointError

DCP_METADATA = ".metadata"


def sharded_model_directory(checkpoint: Path, model_index: int = 0) -> Path:
    """The DCP directory of a model: ``checkpoint`` itself, or its ``model_<i>`` (a ``save_state``
    checkpoint) or ``pytorch_model_fsdp_<i>`` (what ``save_fsdp_model`` writes, as in Accelerate)."""
    if (checkpoint / DCP_METADATA).exists():
        return checkpoint
    for candidate in (checkpoint / f"pytorch_model_fsdp_{model_index}", checkpoint / f"model_{model_index}"):
        if (candidate / DCP_METADATA).exists():
            return candidate
    candidate = checkpoint / f"model_{model_index}"
    if not checkpoint.is_dir():
        raise CheckpointError(f"{checkpoint} does not exist or is not a directory")
    if candidate.is_dir():
        raise CheckpointError(f"{candidate} holds no sharded weights ({DCP_METADATA} is missing): it was saved with "
                              "FULL_STATE_DICT and is a model directory already, or the save never finished")
    raise CheckpointError(f"{checkpoint} is not a sharded FSDP checkpoint: expected {checkpoint}/{DCP_METADATA} or "
                          f"{candidate}/{DCP_METADATA} (save_state with state_dict_type SHARDED_STATE_DICT writes them)")


def read_sharded_weights(directory: str | os.PathLike) -> dict[str, Any]:
    """Every tensor of a DCP directory, whole, in CPU memory (no process group needed)."""
    import torch

    from .checkpoint import dcp_load, tensor_entries

    path = Path(directory)
    state = {key: torch.empty(tuple(entry.size), dtype=entry.properties.dtype)
             for key, entry in tensor_entries(path).items()}
    dcp_load(state, path, no_dist=True)
    return state


def merge_fsdp_weights(checkpoint_dir: str | os.PathLike, output_path: str | os.PathLike,
                       safe_serialization: bool = True, remove_checkpoint_dir: bool = False,
                       model_index: int = 0, max_shard_size: int | str = "10GB") -> list[str]:
    """Merge the shards of a sharded FSDP checkpoint into full model weights in ``output_path``.

    Args:
        checkpoint_dir: a ``save_state`` checkpoint written with ``SHARDED_STATE_DICT`` (its
            ``model_<model_index>`` is merged), or a model's DCP directory itself.
        output_path: directory to write ``model.safetensors`` (or ``pytorch_model.bin``) into,
            sharded with an index above ``max_shard_size``.
        safe_serialization: safetensors (default) or a torch pickle of tensors.
        remove_checkpoint_dir: delete ``checkpoint_dir`` once the weights are written.

    Called by every process of a distributed run, as Accelerate's scripts do, the main process
    merges and the others wait for it (they return no names): one writer per file.

    Returns the names of the files written.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        written = []
        if dist.get_rank() == 0:
            written = _merge(checkpoint_dir, output_path, safe_serialization, remove_checkpoint_dir, model_index,
                             max_shard_size)
        dist.barrier()
        return written
    return _merge(checkpoint_dir, output_path, safe_serialization, remove_checkpoint_dir, model_index, max_shard_size)


def _merge(checkpoint_dir: str | os.PathLike, output_path: str | os.PathLike, safe_serialization: bool,
           remove_checkpoint_dir: bool, model_index: int, max_shard_size: int | str) -> list[str]:
    from drivetrain.plugin_api import output_write_error, write_model_files

    check_output(Path(checkpoint_dir), Path(output_path), remove_checkpoint_dir)
    source = sharded_model_directory(Path(checkpoint_dir), model_index)
    state = read_sharded_weights(source)
    try:  # each file is written under a temporary name and renamed: none is left half-written
        written = write_model_files(state, output_path, max_shard_size=max_shard_size,
                                    safe_serialization=safe_serialization)
    except OSError as error:
        raise output_write_error(Path(output_path), "merge-weights", error) from None
    if remove_checkpoint_dir:
        shutil.rmtree(checkpoint_dir)
    return written


def check_output(checkpoint: Path, output: Path, remove_checkpoint_dir: bool) -> None:
    """Refuse, before reading anything, an output that could not be written whole or that removing the
    checkpoint would delete (the same rules as ``drivetrain checkpoint export``)."""
    from drivetrain.plugin_api import refuse_unusable_output

    refuse_unusable_output(output, "merge-weights", source=checkpoint if remove_checkpoint_dir else None,
                           source_role="which --remove-checkpoint-dir deletes with the merged weights")


def add_merge_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "merge-weights", help="merge a sharded FSDP checkpoint into one safetensors model",
        description="Merge the shards of a checkpoint saved with SHARDED_STATE_DICT into full model weights, "
                    "in one process (any number of processes may have written it).")
    parser.add_argument("checkpoint_directory", help="a save_state checkpoint, or a model's sharded directory")
    parser.add_argument("output_path", help="directory to write the model into")
    parser.add_argument("--unsafe-serialization", "--unsafe_serialization", action="store_true",
                        help="write pytorch_model.bin instead of model.safetensors")
    parser.add_argument("--remove-checkpoint-dir", "--remove_checkpoint_dir", action="store_true",
                        help="delete the checkpoint directory after merging")
    parser.add_argument("--model-index", "--model_index", type=int, default=0,
                        help="which model of a save_state checkpoint (default 0)")
    parser.add_argument("--max-shard-size", "--max_shard_size", default="10GB",
                        help="split the output above this size (default 10GB)")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    written = merge_fsdp_weights(args.checkpoint_directory, args.output_path,
                                 safe_serialization=not args.unsafe_serialization,
                                 remove_checkpoint_dir=args.remove_checkpoint_dir, model_index=args.model_index,
                                 max_shard_size=args.max_shard_size)
    for name in written:
        print(os.path.join(args.output_path, name))
    if args.remove_checkpoint_dir:
        print(f"removed {args.checkpoint_directory}")
    return 0
