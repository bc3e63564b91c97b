"""The lower bound of the device peak per (recompute value, micro-batch, sharding, offload value) of a group
(simulator/search/memory_bound.py, docs/search/time_to_answer.md round 8): by hand on a key above HBM and one under
it, and below the exact peak of every member that passes the rules on hypothesis-drawn small spaces (both
frameworks, every sharding and offload value)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.errors import UserError
from simulator.memory.estimate import estimate_memory
from simulator.memory.nccl import nccl_bytes
from simulator.search import search
from simulator.search.evaluate import RUNTIME, Evaluated, resolve
from simulator.search.group_bound import group_variants
from simulator.search.memory_bound import MEMORY_BOUND_REASON, memory_lowers, skip_key
from simulator.search.run import bound_groups, candidate_groups, search_context

REL = 1e-9

#: Korthikanti et al.'s 22B GPT (h 6144, 48 layers, 64 heads, vocabulary 51,200, 2,048 learned positions) on one
#: DGX A100 80GB, tp 8, pp 1, dp 1, SP, unfused attention (scenarios/korthikanti_22b.yaml), 8 sequences per step
HAND = {"system": {"profile": "dgx_a100_80gb", "nodes": 1}, "model": {"preset": "korthikanti-22b"},
        "parallel": {"tp": 8, "pp": 1, "dp": 1, "vpp": 1, "sp": True},
        "training": {"seq_len": 2048, "micro_batch": 8, "global_batch": 8, "precision": "bf16",
                     "attention": "unfused"},
        "search": {"recompute": ["none", "full"], "micro_batch": [8], "sharding": ["none"], "offload": ["none"],
                   "tp_comm_overlap": [False], "schedule": ["1f1b"], "split": ["uniform"]}}


def test_a_key_above_hbm_and_one_under_it_by_hand():
    """Per GPU (tp 8): each layer holds 12 h^2 / 8 weights plus its replicated norms (4h) and biases (2.875h):
    56,665,344 parameters; 48 layers and the embeddings (51,200 h / 8 + 2,048 h + the final norm's 2h: 51,916,800)
    make 2,771,853,312, at 18 B each (bf16 weights, fp32 gradients in Megatron's DDP buffer, fp32 main copy, two fp32
    Adam moments): 49,893,359,616 B. Activations at b 8, m 1 (one micro-batch in flight): without recompute
    Korthikanti's s b h (34 + 5 a s / h) / t per layer = 100,663,296 x (34 + 320/3) / 8, x 48 layers =
    84,959,821,824 B; with full recompute each layer keeps its input, 2 s b h / t = 25,165,824 B, x 48 =
    1,207,959,552 B. With NCCL's buffers and the runtime, no recompute is 137.9e9 B > 80 GiB (85.9e9): the key is
    skipped, unresolved; full recompute 54.1e9 B: kept, and its plan's peak (56.6e9 B) is above its bound."""
    ctx = search_context(HAND)
    (group,), _ = candidate_groups(ctx, 10**6)
    group_variants(ctx, group, resolve)
    plan = group.plans[8, "none"]
    rest = nccl_bytes(plan, ctx.fixed.cluster, 0).total + RUNTIME
    states = 2_771_853_312 * 18
    bounds = memory_lowers(ctx, group)
    assert abs(bounds["none", 8]["none", "none"] - (states + 84_959_821_824 + rest)) <= REL * states
    assert abs(bounds["full", 8]["none", "none"] - (states + 1_207_959_552 + rest)) <= REL * states
    assert bounds["none", 8]["none", "none"] > ctx.capacity > bounds["full", 8]["none", "none"]
    result = search(HAND)
    assert result.rejected == {MEMORY_BOUND_REASON: 1} and [p["recompute"] for p in result.plans] == ["full"]
    assert result.plans[0]["device_peak_bytes"] >= bounds["full", 8]["none", "none"]
    out = Evaluated()
    (fresh,) = bound_groups(ctx, candidate_groups(ctx, 10**6)[0], out)
    gone = set()
    for key in dict.fromkeys((p["recompute"], p["micro_batch"]) for p in fresh.points):   # as the search admits
        gone |= skip_key(ctx, out, fresh, key, [p for p in fresh.points if (p["recompute"], p["micro_batch"]) == key])
    kept = [p for p in fresh.points if id(p) not in gone]
    assert [p["recompute"] for p in kept] == ["full"] and out.rejected == {MEMORY_BOUND_REASON: 1}
    # the skipped key's bound is noted as a lower bound of the smallest peak (a no-fit report would name it)
    peak, exact, named = out.least_oom
    assert peak == bounds["none", 8]["none", "none"] and not exact and named["recompute"] == "none"


def _space(framework: str, tp: list[int], pp: list[int], schedule: str, recompute: list[str], gpus: int) -> dict:
    """The 22B model on ``gpus`` H100s (host memory: every offload value), both frameworks (PyTorch with AMP: fp32
    residual stream below ZeRO-3, gradients freed between steps)."""
    training = {"seq_len": 2048, "global_batch": 16, "framework": framework,
                "precision": "amp_bf16" if framework == "pytorch" else "bf16"}
    if framework == "pytorch":
        training["grad_set_to_none"] = True
    return {"system": {"profile": "dgx_h100", "nodes": gpus // 8}, "model": {"preset": "korthikanti-22b"},
            "training": training,
            "search": {"tp": tp, "pp": pp, "vpp": [1], "schedule": ["1f1b", schedule], "split": ["uniform"],
                       "recompute": recompute, "micro_batch": [1, 2, 8], "tp_comm_overlap": [False]}}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(framework=st.sampled_from(["megatron", "pytorch"]), tp=st.sampled_from([[2], [8], [1, 4]]),
       pp=st.sampled_from([[1], [1, 2], [1, 4]]), schedule=st.sampled_from(["gpipe", "zb1p", "dualpipev"]),
       recompute=st.lists(st.sampled_from(["none", "selective", "full"]), min_size=1, max_size=2, unique=True),
       gpus=st.sampled_from([8, 16]))
def test_every_member_that_passes_the_rules_peaks_above_its_bound(framework, tp, pp, schedule, recompute, gpus):
    """Every member of every group that passes the rules has a bound (its sharding has a representative, its offload
    value passes that rule) and its exact device peak (estimate_memory of every stage, NCCL's buffers, the runtime)
    is at least it; so a member skipped by the bound is out of memory or rejected by a rule."""
    ctx = search_context(_space(framework, tp, pp, schedule, recompute, gpus))
    checked = 0
    for p, bound, peak in _members_bound_and_peak(ctx):
        assert peak >= bound * (1 - REL), (p, peak, bound)
        checked += 1
    assert checked > 0


def _members_bound_and_peak(ctx):
    """(point, its key's memory bound, its exact device peak) of every member of every group that passes the rules."""
    groups, _ = candidate_groups(ctx, 10**6)
    for g in groups:
        group_variants(ctx, g, resolve)
        bounds = memory_lowers(ctx, g)
        for p in g.points:
            try:
                plan = resolve(ctx, p)
            except UserError:
                continue
            yield (p, bounds[p["recompute"], p["micro_batch"]][p["sharding"], p["offload"]],
                   estimate_memory(plan, cluster=ctx.fixed.cluster).device_peak_bytes)


def test_moe_members_peak_above_their_bounds():
    """The same property on a MoE model (gpt-oss-120b: MoE layers on an expert-parallel group, the expected
    routed load), on two DGX H100 nodes with every sharding and offload value of the default space."""
    ctx = search_context({"system": {"profile": "dgx_h100", "nodes": 2}, "model": {"preset": "gpt-oss-120b"},
                          "training": {"seq_len": 4096, "global_batch": 32},
                          "search": {"tp": [2], "pp": [1, 4], "ep": [1, 8], "vpp": [1], "schedule": ["1f1b"],
                                     "split": ["uniform"], "micro_batch": [1, 2], "recompute": ["none", "full"],
                                     "tp_comm_overlap": [False]}})
    checked = [bound / peak for _, bound, peak in _members_bound_and_peak(ctx)]
    assert len(checked) > 20 and max(checked) <= 1 + REL
