"""Plan validation (every rule of issue 4 by its message text) and rank groups."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import UserError
from simulator.model import ModelSpec, load_model_preset
from simulator.plan import ALL_DIMS, resolve_plan

LLAMA70 = load_model_preset("llama3-70b")     # 64 heads, 8 kv heads, 80 layers
MIXTRAL = load_model_preset("mixtral-8x7b")   # 8 experts
TRAIN = {"seq_len": 4096, "micro_batch": 1, "global_batch": 64}


def _fails(model, parallel, training, world, key, fragment):
    with pytest.raises(UserError) as e:
        resolve_plan(model, parallel, training, world)
    assert e.value.key_path == key
    assert fragment in e.value.message, e.value.message
    return e.value.message


def test_world_size_product_names_every_factor():
    msg = _fails(LLAMA70, {"tp": 8, "pp": 2, "cp": 2, "dp": 3}, TRAIN, 64, "parallel.dp",
                 "world size = tp*cp*ulysses*pp*dp")
    assert "tp (8) * cp (2) * ulysses (1) * pp (2) * dp (3) = 96 != 64 GPUs" in msg
    _fails(LLAMA70, {"tp": 8, "pp": 3}, TRAIN, 64, "parallel.dp",
           "64 GPUs is not divisible by tp (8) * cp (1) * ulysses (1) * pp (3) = 24")


def test_dp_is_derived():
    rp = resolve_plan(LLAMA70, {"tp": 8, "pp": 4, "cp": 2}, TRAIN, 256)
    assert rp.dp == 4 and rp.num_microbatches == 16 and rp.dense_shard_degree == 8


def test_heads_divisible_by_tp():
    m = ModelSpec(layers=2, hidden=768, heads=12, vocab=1000)
    _fails(m, {"tp": 8}, TRAIN, 8, "parallel.tp", "heads (12) is not divisible by tp (8)")


def test_tp_above_kv_heads_replicates_kv_and_says_so():
    rp = resolve_plan(LLAMA70, {"tp": 16}, TRAIN, 16)
    assert any("K/V heads are replicated" in n and "tp (16) > kv_heads (8)" in n for n in rp.notes)
    m = ModelSpec(layers=2, hidden=1536, heads=12, kv_heads=6, vocab=1000, activation="swiglu", ffn_hidden=4096)
    _fails(m, {"tp": 4}, TRAIN, 4, "parallel.tp", "kv_heads (6) is not divisible by tp (4)")


def test_seq_divisible_by_2cp_for_head_tail():
    _fails(LLAMA70, {"cp": 4}, {**TRAIN, "seq_len": 4100}, 4, "training.seq_len",
           "seq_len (4100) is not divisible by 2*cp = 8")


def test_heads_per_tp_rank_divisible_by_ulysses():
    _fails(LLAMA70, {"tp": 8, "ulysses": 3}, TRAIN, 24, "parallel.ulysses",
           "heads (64) / tp (8) = 8 is not divisible by ulysses (3)")


def test_ulysses_beyond_kv_heads_replicates_kv_and_says_so():
    rp = resolve_plan(LLAMA70, {"tp": 2, "ulysses": 8}, TRAIN, 16)
    assert any("kv_heads (8) / tp (2) = 4 < ulysses (8): K/V heads are replicated" in n for n in rp.notes)


def test_sp_needs_sequence_divisible_by_tp():
    _fails(LLAMA70, {"tp": 8, "sp": True, "cp": 2}, {**TRAIN, "seq_len": 2050}, 16, "training.seq_len",
           "seq_len (2050) is not divisible by 2*cp = 4")
    _fails(LLAMA70, {"tp": 8, "sp": True}, {**TRAIN, "seq_len": 4100}, 8, "training.seq_len",
           "(seq_len/cp) % tp must be 0: seq_len (4100) / (cp (1) * ulysses (1)) = 4100 is not divisible by tp (8)")


def test_experts_divisible_by_ep():
    _fails(MIXTRAL, {"ep": 3}, TRAIN, 3, "parallel.ep", "experts (8) is not divisible by ep (3)")


def test_global_batch_divisible_by_micro_batch_times_dp():
    _fails(LLAMA70, {"tp": 8}, {**TRAIN, "global_batch": 30, "micro_batch": 2}, 64, "training.global_batch",
           "global_batch (30) is not divisible by micro_batch (2) * dp (8) = 16")


def test_sp_needs_tp():
    _fails(LLAMA70, {"sp": True}, TRAIN, 8, "parallel.sp", "sp (sequence parallelism) needs tp > 1, got tp = 1")


def test_megatron_fsdp_needs_distributed_optimizer():
    _fails(LLAMA70, {"megatron_fsdp": "optim_grads"}, TRAIN, 8, "parallel.megatron_fsdp",
           "megatron_fsdp (optim_grads) needs distributed_optimizer: true")


def test_layers_divisible_by_pp_times_vpp_unless_split_given():
    _fails(LLAMA70, {"pp": 3}, TRAIN, 3, "parallel.pp",
           "layers (80) is not divisible by pp (3) * vpp (1) = 3; give parallel.pipeline_layers")
    _fails(LLAMA70, {"pp": 4, "vpp": 3}, TRAIN, 4, "parallel.pp", "layers (80) is not divisible by pp (4) * vpp (3)")
    rp = resolve_plan(LLAMA70, {"pp": 3, "pipeline_layers": [26, 27, 27]}, TRAIN, 3)
    assert [len(s) for s in rp.stage_layers] == [26, 27, 27]
    _fails(LLAMA70, {"pp": 3, "pipeline_layers": [26, 27]}, TRAIN, 3, "parallel.pipeline_layers",
           "must have pp*vpp = 3 non-negative entries summing to layers (80); got 2 entries summing to 53")


def test_interleaved_chunks_follow_megatron_assignment():
    rp = resolve_plan(LLAMA70, {"pp": 4, "vpp": 2}, TRAIN, 4)
    assert rp.stage_layers[0] == tuple(range(0, 10)) + tuple(range(40, 50))
    assert rp.stage_chunks[1] == (10, 10)


def test_other_rules():
    _fails(LLAMA70, {"tpp": 2}, TRAIN, 8, "parallel.tpp", "unknown key")
    _fails(LLAMA70, {"order": "tp-dp-pp"}, TRAIN, 8, "parallel.order", "must name each of tp, cp, ep, dp, pp once")
    _fails(MIXTRAL, {"tp": 2, "ep": 4}, TRAIN, 8, "parallel.sp", "MoE with tp (2) > 1 needs sp: true")
    _fails(LLAMA70, {"ep": 2}, TRAIN, 8, "parallel.ep", "needs a MoE model")
    _fails(LLAMA70, {"zero": 1, "distributed_optimizer": True}, TRAIN, 8, "parallel.zero", "choose one")
    _fails(LLAMA70, {"vpp": 2}, TRAIN, 8, "parallel.vpp", "vpp (2) > 1 needs pp > 1")
    _fails(LLAMA70, {"schedule": "zigzag"}, TRAIN, 8, "parallel.schedule", "'zigzag'")
    _fails(MIXTRAL, {"tp": 2, "sp": True, "ep": 8}, TRAIN, 2, "parallel.ep",
           "tp (2) * cp (1) * ulysses (1) * dp (1) = 2 is not divisible by ep (8) * etp (1)")


def test_megatron_default_order_groups():
    rp = resolve_plan(LLAMA70, {"tp": 2, "cp": 2, "pp": 2}, TRAIN, 16)     # dp = 2
    assert rp.rank_groups("tp")[:2] == ((0, 1), (2, 3))
    assert rp.rank_groups("cp")[0] == (0, 2)
    assert rp.rank_groups("dp")[0] == (0, 4)
    assert rp.rank_groups("pp")[0] == (0, 8)
    assert rp.rank_groups("dp_cp")[0] == (0, 2, 4, 6)


def test_expert_grid_groups():
    rp = resolve_plan(MIXTRAL, {"tp": 2, "sp": True, "ep": 4}, TRAIN, 16)  # dp 8, edp = 16/4 = 4
    assert rp.edp == 4
    assert rp.rank_groups("ep")[0] == (0, 1, 2, 3)
    assert rp.rank_groups("edp")[0] == (0, 4, 8, 12)


@settings(max_examples=60, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), cp=st.sampled_from([1, 2]), u=st.sampled_from([1, 2]),
       pp=st.sampled_from([1, 2, 4]), dp=st.sampled_from([1, 2, 3]), ep=st.sampled_from([1, 2, 4, 8]),
       order=st.permutations(["tp", "cp", "ep", "dp", "pp"]))
def test_rank_groups_partition_the_world_once_per_dimension(tp, cp, u, pp, dp, ep, order):
    world = tp * cp * u * pp * dp
    if (tp * cp * u * dp) % ep:
        return
    rp = resolve_plan(MIXTRAL, {"tp": tp, "cp": cp, "ulysses": u, "pp": pp, "ep": ep, "sp": tp > 1,
                                "order": "-".join(order)},
                      {"seq_len": 4096, "micro_batch": 1, "global_batch": 6 * dp}, world)
    sizes = {"tp": tp, "cp": cp, "ulysses": u, "dp": dp, "pp": pp, "ep": ep, "etp": 1, "edp": rp.edp,
             "dp_cp": dp * cp * u}
    for dim in ALL_DIMS:
        groups = rp.rank_groups(dim)
        flat = [r for g in groups for r in g]
        assert sorted(flat) == list(range(world)), dim
        assert all(len(g) == sizes[dim] for g in groups), dim


@pytest.mark.parametrize("parallel", [{"tp": 2, "pp": 2, "cp": 2, "ep": 8, "sp": True},
                                      {"tp": 4, "pp": 2, "ulysses": 2, "ep": 2, "sp": True},
                                      {"tp": 2, "pp": 4, "ep": 2, "etp": 2, "sp": True, "order": "tp-pp-cp-dp-ep"},
                                      {"tp": 2, "pp": 2, "cp": 2, "ep": 4, "sp": True, "order": "pp-dp-ep-cp-tp"}])
def test_one_group_equals_the_plans_rank_groups(parallel):
    """The group of one rank, computed alone (:meth:`ResolvedPlan.rank_group_of`, what NCCL's memory reads), is
    :meth:`ResolvedPlan.rank_groups`' group holding it."""
    rp = resolve_plan(load_model_preset("mixtral-8x7b"), parallel,
                      {"seq_len": 1024, "micro_batch": 1, "global_batch": 512}, 64)
    for dim in ("tp", "cp", "ulysses", "dp", "pp", "etp", "ep", "edp", "dp_cp"):
        for group in rp.rank_groups(dim):
            assert all(rp.rank_group_of(dim, r) == group for r in group), dim


def test_moe_serving_with_tp_runs_without_sp():
    # vLLM and SGLang run MoE under tensor parallelism without sequence parallelism: only training needs sp: true
    infer = {"seq_len": 4096, "micro_batch": 8, "global_batch": 32, "mode": "inference"}
    plan = resolve_plan(MIXTRAL, {"tp": 2, "ep": 4}, infer, 8)
    assert (plan.parallel.tp, plan.parallel.sp, plan.dp, plan.edp) == (2, False, 4, 2)


def test_moe_under_tp_without_sp_counts_shared_tokens_once():
    """TP ranks without SP hold the same tokens, so an expert group routes each token once (simulator/plan/shape.py).
    DeepSeek-V3 (256 experts, top-8) decoding one sequence on 8 GPUs with tp 8 and ep 8: the 8 selected experts get
    one row each, so a rank's 32 local experts receive 8 / 8 = 1 row and one expert is touched in expectation
    (32 x (1 - (1 - 8/256)^1) = 1.0); counting the 8 copies as distinct tokens gave 8 rows and 7.17 experts."""
    from simulator.plan import Batch
    from simulator.program.serving import touched_experts

    v3 = load_model_preset("deepseek-v3")
    infer = {"seq_len": 4096, "micro_batch": 1, "global_batch": 1, "mode": "inference"}
    plan = resolve_plan(v3, {"tp": 8, "ep": 8}, infer, 8)
    sh = plan.shape_of(Batch(1, 1, 1000))
    assert sh.routed_rows == pytest.approx(1.0)
    assert touched_experts(v3, 8, sh.routed_rows / 8) == pytest.approx(32 * (1 - (1 - 8 / 256)), rel=1e-12)
    # with sequence parallelism (training's layout) each rank routes its own T / tp tokens: unchanged rule
    train = resolve_plan(v3, {"tp": 8, "ep": 8, "sp": True},
                         {"seq_len": 4096, "micro_batch": 1, "global_batch": 8}, 8)
    assert train.shape.routed_rows == pytest.approx(4096 / 8 * 8)
