"""The parallelism_config strategy: ParallelismConfig's contract in-process, ND layouts on real
processes (tests/scripts/check_parallelism.py: TP=2 on 2 processes; FSDP2 × TP, HSDP and the Ulysses
mesh groups in one launch on 4)."""

from __future__ import annotations

import pytest
import torch

from drivetrain.errors import ConfigError
from launching import assert_ok, launch


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16))


# ------------------------------------------------------------------ the layout


def test_sizes_names_and_environment(clean_env):
    from drivetrain import ParallelismConfig, TorchContextParallelConfig, TorchTensorParallelConfig

    config = ParallelismConfig(dp_replicate_size=2, dp_shard_size=2, tp_size=2)
    assert (config.cp_size, config.total_size, config.data_parallel_size, config.non_data_parallel_size) == (1, 8, 4, 2)
    assert config.active_mesh_dims == ["dp_replicate", "dp_shard", "tp"]
    assert config.dp_dim_names == ["dp_replicate", "dp_shard"] and config.non_dp_dim_names == ["tp"]
    assert config.fsdp_dim_names == ["dp_replicate", "dp_shard_cp"] and config.fsdp_enabled
    assert isinstance(config.tp_handler, TorchTensorParallelConfig) and config.cp_handler is None
    clean_env.setenv("PARALLELISM_CONFIG_TP_SIZE", "4")
    clean_env.setenv("DRIVETRAIN_PARALLELISM_CONFIG_CP_SIZE", "2")
    clean_env.setenv("PARALLELISM_CONFIG_CP_COMM_STRATEGY", "alltoall")
    from_env = ParallelismConfig()
    assert (from_env.dp_replicate_size, from_env.dp_shard_size, from_env.tp_size, from_env.cp_size) == (1, 1, 4, 2)
    assert from_env.cp_handler == TorchContextParallelConfig(cp_comm_strategy="alltoall")
    assert ParallelismConfig(tp_size=2).tp_size == 2  # arguments win over the environment
    assert ParallelismConfig.from_environment({}).total_size == 1
    env = ParallelismConfig(dp_shard_size=2, cp_size=2).environment()
    assert env["PARALLELISM_CONFIG_DP_SHARD_SIZE"] == env["DRIVETRAIN_PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "2"
    assert env["PARALLELISM_CONFIG_CP_COMM_STRATEGY"] == "alltoall"  # still in the environment


class _RecordingMesh:
    """What torch's init_device_mesh returns, reduced to what the layout asks of it."""

    def __init__(self, device_type, shape, mesh_dim_names):
        self.device_type, self.shape, self.mesh_dim_names = device_type, shape, mesh_dim_names
        self.flattened = []

    def __getitem__(self, dims):
        mesh = self

        class Slice:
            def _flatten(self, name):
                mesh.flattened.append((list(dims), name))
                return f"flat:{name}"

        return Slice()


@pytest.mark.parametrize("sizes, names", [
    ((1, 1, 1, 1), ()),
    ((4, 1, 1, 1), ("dp_replicate",)),
    ((1, 1, 1, 2), ("tp",)),
    ((2, 1, 1, 2), ("dp_replicate", "tp")),
    ((1, 2, 2, 1), ("dp_shard", "cp")),
    ((2, 2, 2, 2), ("dp_replicate", "dp_shard", "cp", "tp")),
])
def test_the_mesh_holds_the_dimensions_larger_than_one(clean_env, monkeypatch, sizes, names):
    import torch.distributed.device_mesh as device_mesh

    from drivetrain import ParallelismConfig

    monkeypatch.setattr(device_mesh, "init_device_mesh", _RecordingMesh)
    replicate, shard, cp, tp = sizes
    config = ParallelismConfig(dp_replicate_size=replicate, dp_shard_size=shard, cp_size=cp, tp_size=tp)
    assert config._get_mesh() == (names, tuple(dict(zip(("dp_replicate", "dp_shard", "cp", "tp"), sizes))[n]
                                               for n in names))
    mesh = config.build_device_mesh("cpu")
    if not names:  # one process: nothing to lay out, and no dimension to ask for
        assert mesh is None and config.device_mesh is None and not config.has_dimension("dp")
        return
    assert (mesh.shape, mesh.mesh_dim_names) == (tuple(s for s in sizes if s > 1), names)
    joined = {"dp": [n for n in names if n in ("dp_replicate", "dp_shard")],
              "dp_shard_cp": [n for n in names if n in ("dp_shard", "cp")],
              "dp_cp": [n for n in names if n != "tp"]}
    assert mesh.flattened == [(dims, flat) for flat, dims in joined.items() if dims]
    for flat, dims in joined.items():
        assert config.has_dimension(flat) == bool(dims)
        if dims:
            assert config.submesh(flat) == f"flat:{flat}"
    for absent in set(("dp_replicate", "dp_shard", "cp", "tp")) - set(names):
        assert not config.has_dimension(absent)
        with pytest.raises(ConfigError, match=f"no '{absent}' dimension, since its size is 1"):
            config.submesh(absent)


@pytest.mark.parametrize("kwargs, message", [
    (dict(tp_size=0), "tp_size must be at least 1, got 0"),
    (dict(dp_shard_size="two"), "dp_shard_size='two' is not a whole number"),
    (dict(cp_size=True), "must be a whole number of processes"),
    (dict(cp_handler="ring"), "cp_handler must be a TorchContextParallelConfig"),
])
def test_bad_layouts_are_refused(clean_env, kwargs, message):
    from drivetrain import ParallelismConfig

    with pytest.raises(ConfigError, match=message):
        ParallelismConfig(**kwargs)


def test_handlers_need_their_dimension(clean_env):
    from drivetrain import ParallelismConfig, TorchContextParallelConfig

    with pytest.raises(ConfigError, match="cp_handler was given but cp_size is 1"):
        ParallelismConfig(cp_handler=TorchContextParallelConfig())
    with pytest.raises(ConfigError, match=r"^Invalid cp_comm_strategy: ring; use one of \['allgather', 'alltoall'\]$"):
        TorchContextParallelConfig(cp_comm_strategy="ring")
    clean_env.setenv("PARALLELISM_CONFIG_CP_COMM_STRATEGY", "ring")
    with pytest.raises(ConfigError, match="^Invalid cp_comm_strategy: ring;"):
        ParallelismConfig(cp_size=2)  # the variable is checked as the argument is


def test_sizes_must_cover_the_processes(clean_env):
    from drivetrain import ParallelismConfig

    with pytest.raises(ConfigError) as refused:
        ParallelismConfig(dp_shard_size=2, tp_size=2).validate(6)
    assert str(refused.value) == ("ParallelismConfig dp_replicate_size=1 × dp_shard_size=2 × cp_size=1 × tp_size=2 = 4 "
                                  "processes, but the run has 6; change the sizes so their product is 6")


def test_public_names_at_accelerates_paths(clean_env):
    import drivetrain
    import drivetrain.utils
    from drivetrain.parallelism_config import ParallelismConfig
    from drivetrain.plugin_manager import get_plugin_manager
    from drivetrain.selection.choice import requests_from_env

    assert drivetrain.ParallelismConfig is ParallelismConfig is drivetrain.utils.ParallelismConfig
    for name in ("TorchTensorParallelConfig", "TorchContextParallelConfig", "TorchTensorParallelPlugin"):
        assert getattr(drivetrain.utils, name).__module__ == "drivetrain_fsdp.parallelism.config"
    manager = get_plugin_manager()
    assert requests_from_env(manager, {"ACCELERATE_USE_PARALLELISM_CONFIG": "true"}).strategy == "parallelism_config"
    spec = {s.name: s for _p, s in manager.registrations("drivetrain_register_strategies")}["parallelism_config"]
    assert spec.accelerator_arguments == ("parallelism_config", "torch_tp_plugin") and not spec.automatic


# ------------------------------------------------------------------ refusals and plans


def test_context_parallelism_is_refused_on_the_cpu(clean_env):
    from drivetrain import ParallelismConfig
    from drivetrain_fsdp.parallelism.strategy import check_platform

    with pytest.raises(ConfigError, match=r"^context parallelism \(cp_size > 1\) runs attention as ring attention "
                                          r".*CUDA only.*set cp_size to 1 on the CPU, or run on GPUs$"):
        check_platform(ParallelismConfig(cp_size=2), "cpu")
    check_platform(ParallelismConfig(cp_size=2), "cuda")  # torch has the kernels there


def test_replicas_alone_need_a_torch_that_splits_a_mesh_dimension(clean_env, monkeypatch):
    from torch.distributed.device_mesh import DeviceMesh

    from drivetrain import ParallelismConfig
    from drivetrain_fsdp.parallelism.strategy import check_platform

    check_platform(ParallelismConfig(dp_replicate_size=2, tp_size=2), "cpu")
    monkeypatch.delattr(DeviceMesh, "_unflatten", raising=False)
    with pytest.raises(ConfigError, match=r"^dp_replicate_size=2 with dp_shard_size=1 and cp_size=1 needs torch 2\.9 "
                                          r"or later .*or shard the model instead \(dp_shard_size\)$"):
        check_platform(ParallelismConfig(dp_replicate_size=2, tp_size=2), "cpu")
    check_platform(ParallelismConfig(dp_replicate_size=2, dp_shard_size=2), "cpu")  # sharded: not needed


def test_tensor_parallel_plan_from_the_model_or_the_user(clean_env):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from drivetrain import ParallelismConfig, TorchTensorParallelConfig
    from drivetrain_fsdp.parallelism.wrap import _expanded, plan_of

    class Layout:  # what plan_of reads from the runtime
        config = ParallelismConfig(tp_size=2)

    model = tiny_llama()
    plan = _expanded(model, plan_of(model, Layout()), 2)  # transformers' own plan, `*` as the layer index
    assert type(plan["model.layers.1.self_attn.q_proj"]) is ColwiseParallel
    assert type(plan["model.layers.0.mlp.down_proj"]) is RowwiseParallel
    assert "lm_head" in plan
    if "embed_tokens" in (model.config.base_model_tp_plan or {}):  # not in every transformers release's plan
        assert "model.embed_tokens" in plan
    Layout.config = ParallelismConfig(tp_size=2, tp_handler=TorchTensorParallelConfig(tp_plan={"lm_head": "diagonal"}))
    with pytest.raises(ConfigError, match="tensor-parallel style 'diagonal' is not supported"):
        _expanded(model, plan_of(model, Layout()), 2)
    with pytest.raises(ConfigError, match=r"names 'model.blocks.\*.q', which matches no module"):
        _expanded(model, {"model.blocks.*.q": "colwise"}, 2)
    with pytest.raises(ConfigError, match=r"lm_head.weight has shape \(64, 32\), which does not split evenly over "
                                          r"tp_size=3"):
        _expanded(model, {"lm_head": "colwise"}, 3)
    Layout.config = ParallelismConfig(tp_size=2)
    with pytest.raises(ConfigError, match="Sequential carries none"):
        plan_of(torch.nn.Sequential(torch.nn.Linear(2, 2)), Layout())


@pytest.mark.usefixtures("fresh_state", "private_group")
def test_one_process_layout_and_refused_sizes(clean_env):
    from drivetrain import Accelerator, ParallelismConfig, TorchTensorParallelPlugin
    from drivetrain.state import AcceleratorState

    with pytest.raises(ConfigError, match="= 2 processes, but the run has 1"):
        Accelerator(parallelism_config=ParallelismConfig(tp_size=2))
    AcceleratorState._reset_state()
    with pytest.raises(ConfigError, match="pass parallelism_config or torch_tp_plugin, not both"):
        Accelerator(parallelism_config=ParallelismConfig(), torch_tp_plugin=TorchTensorParallelPlugin())
    AcceleratorState._reset_state()
    accelerator = Accelerator(parallelism_config=ParallelismConfig())
    assert accelerator.torch_device_mesh is None  # every size is 1: no dimension to lay out
    assert (accelerator.data_parallel_rank, accelerator.tensor_parallel_rank, accelerator.data_parallel_shard_rank) == (
        0, 0, 0)
    model = accelerator.prepare(torch.nn.Linear(4, 2))
    assert model(torch.ones(1, 4, device=accelerator.device)).shape == (1, 2)
    AcceleratorState._reset_state()
    # Accelerate's usual pattern: the mesh shards with the FSDP options passed beside it
    from drivetrain import FullyShardedDataParallelPlugin

    fsdp = FullyShardedDataParallelPlugin(fsdp_version=2, reshard_after_forward=False)
    accelerator = Accelerator(parallelism_config=ParallelismConfig(), fsdp_plugin=fsdp)
    assert accelerator.run.selection.strategy.name == "parallelism_config" and accelerator.run.strategy.arguments["fsdp_plugin"] is fsdp
    model = accelerator.prepare(torch.nn.Linear(4, 2))
    assert model(torch.ones(1, 4, device=accelerator.device)).shape == (1, 2)
    AcceleratorState._reset_state()
    plain = Accelerator()  # without a layout: every process is its own data shard
    assert plain.torch_device_mesh is None and not plain.is_composable_parallelism_enabled
    assert (plain.data_parallel_rank, plain.tensor_parallel_rank, plain.pipeline_parallel_rank) == (0, 0, 0)
    with plain.maybe_context_parallel(buffers=[torch.zeros(2)], buffer_seq_dims=[0]):
        pass


def _launch_env(argv, tmp_path, config_text="{}\n"):
    from drivetrain.cli.launch_cmd import build_parser, child_environment, merge_config, resolve_choice
    from drivetrain.plugin_manager import get_plugin_manager

    path = tmp_path / "config.yaml"
    path.write_text(config_text)
    parser = build_parser()
    args = parser.parse_args(["--config-file", str(path), *argv, "script.py"])
    merge_config(args, parser)
    args.num_processes = args.num_processes or 4
    args.num_machines, args.machine_rank, args.nproc_per_node = 1, 0, args.num_processes
    selection = resolve_choice(args, get_plugin_manager())
    return child_environment(args, selection)


def test_launch_options_and_config_block(clean_env, tmp_path):
    env = _launch_env(["--cpu", "--num_processes", "4", "--use_parallelism_config",
                       "--parallelism_config_dp_shard_size", "2", "--parallelism-config-tp-size", "2"], tmp_path)
    assert env["DRIVETRAIN_STRATEGY"] == "parallelism_config"
    assert env["PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "2" and env["PARALLELISM_CONFIG_TP_SIZE"] == "2"
    block = ("strategy: parallelism_config\nparallelism_config:\n  parallelism_config_dp_replicate_size: 2\n"
             "  parallelism_config_dp_shard_size: 2\n")
    env = _launch_env(["--cpu", "--num_processes", "4"], tmp_path, block)
    assert env["PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] == env["DRIVETRAIN_PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "2"
    with pytest.raises(ConfigError, match="= 4 processes, but the run has 2"):
        _launch_env(["--cpu", "--num_processes", "2"], tmp_path, block)
    # what Accelerate's `config` writes for ND with FSDP: the layout runs, sharding with the fsdp_config: options
    env = _launch_env(["--cpu", "--num_processes", "4"], tmp_path,
                      "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\nparallelism_config:\n"
                      "  parallelism_config_dp_shard_size: 2\n  parallelism_config_tp_size: 2\n")
    assert env["DRIVETRAIN_STRATEGY"] == "parallelism_config" and env["PARALLELISM_CONFIG_TP_SIZE"] == "2"
    assert env["FSDP_VERSION"] == "2"
    with pytest.raises(ConfigError, match="= 4 processes, but the run has 2"):
        _launch_env(["--cpu", "--num_processes", "2"], tmp_path,
                    "distributed_type: FSDP\nparallelism_config:\n  parallelism_config_dp_shard_size: 2\n"
                    "  parallelism_config_tp_size: 2\n")
    # without a block, FSDP stays FSDP; a block under a strategy it does not compose is refused
    assert _launch_env(["--cpu", "--num_processes", "2"], tmp_path,
                       "distributed_type: FSDP\n")["DRIVETRAIN_STRATEGY"] == "fsdp"
    with pytest.raises(ConfigError, match="has a parallelism_config: block but the run's strategy is 'ddp'"):
        _launch_env(["--cpu", "--num_processes", "4"], tmp_path,
                    "distributed_type: MULTI_CPU\nparallelism_config:\n  parallelism_config_tp_size: 2\n")


# ------------------------------------------------------------------ real processes


@pytest.mark.multiprocess
def test_tensor_parallel_on_two_processes(tmp_path):
    result = launch("check_parallelism.py", str(tmp_path), "1,1,2", "2,1,1", num_processes=2, timeout=500)
    assert_ok(result)
    assert "CHECK-PARALLELISM-OK" in result.stdout


@pytest.mark.multiprocess
@pytest.mark.usefixtures("fresh_state", "private_group")
def test_checkpoints_resume_under_another_layout(tmp_path):
    # TP=2 -> FSDP2 (dp_shard=2) -> TP=2 in two processes (tests/scripts/check_parallelism_reshard.py) ...
    result = launch("check_parallelism_reshard.py", str(tmp_path), num_processes=2, timeout=400)
    assert_ok(result)
    assert "CHECK-PARALLELISM-RESHARD-OK" in result.stdout
    from safetensors.torch import load_file

    from drivetrain import Accelerator, ParallelismConfig
    from drivetrain.errors import CheckpointError
    from drivetrain.state import AcceleratorState

    # ... then the FSDP2 checkpoint in one process: a plain module under a layout of sizes 1
    reference = load_file(tmp_path / "reference.safetensors")
    accelerator = Accelerator(parallelism_config=ParallelismConfig())
    model = tiny_llama()
    torch.nn.init.zeros_(model.lm_head.weight)  # other weights than saved
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    accelerator.load_state(tmp_path / "dp_shard")
    for name, parameter in model.named_parameters():
        assert type(parameter.data) is torch.Tensor
        torch.testing.assert_close(parameter.detach().cpu(), reference[name], atol=1e-5, rtol=0, msg=name)
        momentum = optimizer.optimizer.state[parameter]["momentum_buffer"]
        torch.testing.assert_close(momentum.cpu(), reference[f"momentum.{name}"], atol=1e-5, rtol=0, msg=name)
    AcceleratorState._reset_state()
    # a run without the layout cannot read the sharded files: it says how to convert them, and changes nothing
    plain = Accelerator()
    model = tiny_llama()
    before = {name: value.clone() for name, value in model.state_dict().items()}
    model, optimizer = plain.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    with pytest.raises(CheckpointError, match=r"model_0 holds no weight files the core reads.*merge-weights"):
        plain.load_state(tmp_path / "dp_shard")
    assert all(torch.equal(value, before[name]) for name, value in model.state_dict().items())
    merged = load_file(next((tmp_path / "merged_dp_shard").glob("*.safetensors")))  # what merge-weights wrote
    model.load_state_dict(merged)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, reference[name], atol=1e-5, rtol=0, msg=name)


@pytest.mark.multiprocess
def test_fsdp_times_tp_hsdp_and_ulysses_groups_on_four_processes(tmp_path, optional_deepspeed_ops):
    # one launch of 4 processes: FSDP2 × TP, HSDP, then (with DeepSpeed) the Ulysses mesh groups,
    # which match DeepSpeed's only if the mesh is laid out its way round (with 2 processes every
    # group is [0, 1])
    layouts = ["1,2,2", "2,2,1"] + (["ulysses:dp_shard"] if optional_deepspeed_ops else [])
    result = launch("check_parallelism.py", str(tmp_path), *layouts, num_processes=4, timeout=600)
    assert_ok(result)
    assert "CHECK-PARALLELISM-OK" in result.stdout
    if "ulysses:dp_shard" in layouts:
        assert "CHECK-SEQUENCE-PARALLEL-MESH-OK dp_shard" in result.stdout


# ------------------------------------------------------------------ Ulysses sequence parallelism (deepspeed)


def test_sequence_parallel_layout_and_refusals(clean_env):
    from drivetrain.utils import DeepSpeedSequenceParallelConfig, ParallelismConfig
    from drivetrain_fsdp.parallelism.strategy import check_platform

    layout = ParallelismConfig(dp_shard_size=2, sp_size=2, sp_handler=DeepSpeedSequenceParallelConfig())
    assert (layout.total_size, layout.sp_backend, layout.sp_handler.sp_attn_implementation) == (4, "deepspeed", "sdpa")
    assert layout.environment()["PARALLELISM_CONFIG_SP_SIZE"] == "2"
    with pytest.raises(ConfigError, match="runs under the deepspeed strategy: pass deepspeed_plugin="):
        check_platform(layout, "cpu")
    with pytest.raises(ConfigError, match="composes with data parallelism only"):
        ParallelismConfig(sp_size=2, tp_size=2)
    with pytest.raises(ConfigError, match="sp_backend 'ring' is not one of"):
        ParallelismConfig(sp_size=2, sp_backend="ring")
    with pytest.raises(ConfigError, match="cannot run Ulysses sequence parallelism"):
        DeepSpeedSequenceParallelConfig(sp_attn_implementation="eager")
    with pytest.raises(ConfigError, match="needs sp_seq_length"):
        DeepSpeedSequenceParallelConfig(sp_seq_length_is_variable=False)
    clean_env.setenv("PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION", "flash_attention_2")
    assert DeepSpeedSequenceParallelConfig().sp_attn_implementation == "flash_attention_2"


def test_sequence_parallel_options_from_the_variables(clean_env):
    from drivetrain.utils import DeepSpeedSequenceParallelConfig

    clean_env.setenv("PARALLELISM_CONFIG_SP_SEQ_LENGTH", "8")
    clean_env.setenv("PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE", "false")
    handler = DeepSpeedSequenceParallelConfig()
    assert (handler.sp_seq_length, handler.sp_seq_length_is_variable) == (8, False)
    clean_env.setenv("PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE", "sometimes")
    with pytest.raises(ConfigError, match="PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE='sometimes' is not a boolean"):
        DeepSpeedSequenceParallelConfig()


def test_sequence_parallel_from_a_deepspeed_config_file(clean_env, tmp_path):
    pytest.importorskip("deepspeed")  # without it the config's deepspeed block is refused, naming the extra
    env = _launch_env(["--cpu", "--num_processes", "2"], tmp_path,
                      "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 1\nparallelism_config:\n"
                      "  parallelism_config_sp_size: 2\n  parallelism_config_sp_backend: deepspeed\n"
                      "  parallelism_config_sp_attn_implementation: sdpa\n")
    assert env["DRIVETRAIN_STRATEGY"] == "deepspeed" and env["PARALLELISM_CONFIG_SP_SIZE"] == "2"
    assert env["PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION"] == "sdpa"


SP_CONFIG_FILE = ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 1\n  gradient_clipping: 0.0\n"
                  "parallelism_config:\n  parallelism_config_sp_size: 2\n  parallelism_config_sp_backend: deepspeed\n"
                  "  parallelism_config_sp_attn_implementation: sdpa\n")


def test_the_launchers_deepspeed_keeps_a_sequence_parallel_layout_given_in_code(clean_env):
    # Accelerate's guide passes parallelism_config= in code and names DeepSpeed in the config file
    from drivetrain import Accelerator
    from drivetrain.utils import ParallelismConfig

    options = {"parallelism_config": ParallelismConfig(sp_size=2)}
    assert Accelerator._strategy_for_options(options) == "parallelism_config"
    clean_env.setenv("DRIVETRAIN_STRATEGY", "deepspeed")
    assert Accelerator._strategy_for_options(options) == "deepspeed"
    clean_env.setenv("DRIVETRAIN_STRATEGY", "fsdp")  # FSDP does not compose a layout: the layout's strategy runs
    assert Accelerator._strategy_for_options(options) == "parallelism_config"


def test_sequence_parallel_mesh_sizes(clean_env):
    from types import SimpleNamespace

    from drivetrain.utils import ParallelismConfig
    from drivetrain_deepspeed.sequence_parallel import MESH_DIMENSIONS, layout_of

    def sizes(world, **given):
        strategy = SimpleNamespace(arguments={"parallelism_config": ParallelismConfig(**given)})
        run = SimpleNamespace(strategy=strategy, state=SimpleNamespace(num_processes=world))
        layout = layout_of(run)
        return layout.dp_replicate_size, layout.dp_shard_size, layout.sp_size

    assert MESH_DIMENSIONS[-1] == "sp"  # innermost: sp peers are neighbouring ranks, as DeepSpeed groups them
    assert sizes(2, sp_size=2, dp_shard_size=1) == (1, 1, 2)
    assert sizes(4, sp_size=2) == (1, 2, 2)  # the dp sizes left out: the other processes shard
    assert sizes(4, sp_size=2, dp_replicate_size=2) == (2, 1, 2)
    with pytest.raises(ConfigError, match="is not the 8 processes of the run"):
        sizes(8, sp_size=2, dp_shard_size=2)


@pytest.mark.multiprocess
def test_ulysses_in_code_and_by_accelerates_recipe_on_two_processes(tmp_path, deepspeed_ops):
    # one launch: the layout and plugin in code, then Accelerate's recipe with the strategy and the
    # layout from a config file (the script uses torch_device_mesh["sp"]). DeepSpeed's all-to-all
    # runs over gloo (all_to_all_single is implemented for CPU tensors).
    path = tmp_path / "config.yaml"
    path.write_text(SP_CONFIG_FILE)
    result = launch("check_sequence_parallel.py", "code", "recipe", num_processes=2,
                    launch_args=("--config-file", str(path)), timeout=400)
    assert_ok(result)
    assert "CHECK-SEQUENCE-PARALLEL-OK" in result.stdout
    assert "CHECK-SEQUENCE-PARALLEL-RECIPE-OK" in result.stdout
