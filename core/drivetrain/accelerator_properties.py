"""The ``Accelerator``'s read-only view of its run: the process, the mesh ranks of composable
parallelism, and the options it was built with. Kept apart from the facade's actions."""

from __future__ import annotations

import contextlib
from typing import Any

import torch


class AcceleratorProperties:
    """Properties over ``self.state``, ``self.run`` and the configuration objects."""

    state: Any
    run: Any
    project_configuration: Any
    dataloader_config: Any
    gradient_state: Any
    _optimizers: list[Any]

    @property
    def device(self) -> torch.device:
        return self.state.device

    @property
    def distributed_type(self):
        return self.state.distributed_type

    @property
    def num_processes(self) -> int:
        return self.state.num_processes

    @property
    def process_index(self) -> int:
        return self.state.process_index

    @property
    def local_process_index(self) -> int:
        return self.state.local_process_index

    @property
    def is_main_process(self) -> bool:
        return self.state.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        return self.state.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        return self.state.is_last_process

    # Ranks of composable parallelism. A strategy that lays processes out on a device mesh
    # answers them through its run extension; otherwise each process is its own data shard.

    def _mesh_attribute(self, name: str, default: Any) -> Any:
        try:
            return self.run.extension_attribute(name)
        except AttributeError:
            return default

    @property
    def parallelism_config(self) -> Any:
        return self._mesh_attribute("parallelism_config", None)

    @property
    def torch_device_mesh(self) -> Any:
        return self._mesh_attribute("torch_device_mesh", None)

    @property
    def is_composable_parallelism_enabled(self) -> bool:
        return bool(self._mesh_attribute("is_composable_parallelism_enabled", False))

    @property
    def data_parallel_rank(self) -> int:
        return self.run.data_parallel_rank

    @property
    def data_parallel_shard_rank(self) -> int:
        return self._mesh_attribute("data_parallel_shard_rank", 0)

    @property
    def tensor_parallel_rank(self) -> int:
        return self._mesh_attribute("tensor_parallel_rank", 0)

    @property
    def context_parallel_rank(self) -> int:
        return self._mesh_attribute("context_parallel_rank", 0)

    @property
    def pipeline_parallel_rank(self) -> int:
        return self._mesh_attribute("pipeline_parallel_rank", 0)

    def maybe_context_parallel(self, buffers: list[Any] | None = None, buffer_seq_dims: list[int] | None = None,
                               no_restore_buffers: set[Any] | None = None) -> contextlib.AbstractContextManager:
        """Split ``buffers`` over the context-parallel processes inside the block (a no-op
        when the run has no such dimension)."""
        enter = self._mesh_attribute("maybe_context_parallel", None)
        if enter is None:
            return contextlib.nullcontext()
        return enter(buffers=buffers, buffer_seq_dims=buffer_seq_dims, no_restore_buffers=no_restore_buffers)

    @property
    def use_distributed(self) -> bool:
        return self.state.use_distributed

    @property
    def mixed_precision(self) -> str:
        return self.state.mixed_precision

    @property
    def project_dir(self) -> str | None:
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        return self.project_configuration.logging_dir

    @property
    def save_iteration(self) -> int:
        return self.project_configuration.iteration

    @property
    def split_batches(self) -> bool:
        return self.dataloader_config.split_batches

    @property
    def dispatch_batches(self) -> bool | None:
        return self.dataloader_config.dispatch_batches

    @property
    def even_batches(self) -> bool:
        return self.dataloader_config.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self.dataloader_config.even_batches = value

    @property
    def use_seedable_sampler(self) -> bool:
        return self.dataloader_config.use_seedable_sampler

    @property
    def non_blocking(self) -> bool:
        return self.dataloader_config.non_blocking

    @property
    def use_stateful_dataloader(self) -> bool:
        return self.dataloader_config.use_stateful_dataloader

    @property
    def gradient_accumulation_steps(self) -> int:
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        self.gradient_state.plugin_kwargs.update({"num_steps": steps})

    @property
    def sync_gradients(self) -> bool:
        return self.gradient_state.sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, value: bool) -> None:
        self.gradient_state.sync_gradients = value

    @property
    def optimizer_step_was_skipped(self) -> bool:
        return any(getattr(opt, "step_was_skipped", False) for opt in self._optimizers)
