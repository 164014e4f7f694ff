"""4 processes laid out as a 2 x 2 DeviceMesh (dp, tp): tensor-parallel peers read the same
batches, the two data-parallel groups read disjoint halves, and dispatching is refused."""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.utils.data import DataLoader

from drivetrain import PartialState
from drivetrain.data_loader import DataLoaderDispatcher, prepare_data_loader
from drivetrain.errors import ConfigError
from drivetrain.utils import gather_object

state = PartialState()
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
loader = prepare_data_loader(DataLoader(list(range(16)), batch_size=2), torch_device_mesh=mesh)
seen = [int(x) for batch in loader for x in batch]
everyone = gather_object([(state.process_index, seen)])
by_rank = dict(everyone)
# ranks 0,1 form data-parallel group 0 (tp peers), ranks 2,3 group 1
assert by_rank[0] == by_rank[1] and by_rank[2] == by_rank[3], by_rank
assert sorted(by_rank[0] + by_rank[2]) == list(range(16)), by_rank
assert len(loader) == 4 and loader.torch_device_mesh is mesh
try:
    DataLoaderDispatcher(list(range(8)), batch_size=2, torch_device_mesh=mesh)
except ConfigError as error:
    assert "model-parallel peers" in str(error)
else:
    raise AssertionError("a dispatcher over a mesh with tensor-parallel peers was accepted")
# an explicit share still wins over the mesh
explicit = prepare_data_loader(DataLoader(list(range(16)), batch_size=2), num_processes=4,
                               process_index=state.process_index, torch_device_mesh=mesh)
assert len(explicit) == 2
print(f"CHECK-MESH-LOADER-OK rank {state.process_index}", flush=True)
