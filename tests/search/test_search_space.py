"""The default plan space covers every plan knob the model prices (issue 30, item 3): TP communication overlap,
per-module selective recompute, CP / Ulysses, every registered schedule, the embedding/loss pipeline split."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.errors import UserError
from simulator.plan.schedules import schedule_names
from simulator.scenario.document import read_document
from simulator.search import search
from simulator.search.bound import BOUND_REASON
from simulator.search.rank import why
from simulator.search.run import search_context
from simulator.search.space import parallel_of, pipeline_layers

ROOT = Path(__file__).resolve().parents[2]


def _22b(**section) -> dict:
    """Korthikanti et al. 2023's 22B GPT (scenarios/korthikanti_22b.yaml) on one DGX A100 80GB, parallel: dropped."""
    data = read_document(ROOT / "scenarios" / "korthikanti_22b.yaml").data
    data.pop("parallel")
    data["search"] = section
    return data


def test_the_default_space_has_every_knob():
    ctx = search_context(_22b())
    v = ctx.space.values
    assert v["schedule"] == schedule_names() and set(v["schedule"]) >= {"1f1b", "gpipe", "dualpipe", "dualpipev",
                                                                        "zb1p", "zbv"}
    assert v["tp_comm_overlap"] == (False, True) and v["split"] == ("uniform", "embedding_loss")
    assert v["recompute"] == ("none", "selective", "selective:core_attn,layernorm",
                              "selective:core_attn,layernorm,mlp", "full")   # a dense model: no moe_act
    assert v["offload"] == ("none", "optimizer", "activations")   # offload_choices: Megatron on a DGX A100 80GB
    assert v["cp"] == v["ulysses"] == (1,)        # 2,048 tokens per sequence (CP and Ulysses from 32K)
    # pp: divisors of 48 layers (uniform) and of 50 (embedding and loss counted as layers), at most 8 GPUs
    assert v["pp"] == (1, 2, 3, 4, 5, 6, 8)
    long = read_document(ROOT / "scenarios" / "search_llama3_70b_h100.yaml").data
    long["training"]["seq_len"] = 32768
    assert search_context(long).space.values["ulysses"] == (1, 2, 4, 8)


def test_members_are_the_merged_inner_combinations():
    """Space.members (one dict per candidate, round 10) gives exactly ``{**outer, **inner}`` of every inner
    combination, keys in the same order (the split schedules' ties sort by the point's items), for every flag
    pair: 3 offloads x 5 recomputes x 5 shardings x 2 micro-batches x 2 overlaps = 300 combinations, 60 with one
    sharding, 150 with one overlap value, 30 with both."""
    ctx = search_context(_22b(micro_batch=[1, 2]))
    outer = next(ctx.space.outer())
    for flags, count in (((False, False), 300), ((True, False), 60), ((False, True), 150), ((True, True), 30)):
        got, want = ctx.space.members(outer, *flags), [{**outer, **i} for i in ctx.space.inner(*flags)]
        assert len(got) == count and got == want
        assert [list(p.items()) for p in got] == [list(p.items()) for p in want]


def test_embedding_loss_split_by_hand():
    # 48 layers, 2 stages x 5 virtual: (48 + 2) / 10 = 5 per chunk, the first and the last 4
    assert pipeline_layers(48, 10) == (4, 5, 5, 5, 5, 5, 5, 5, 5, 4)
    assert sum(pipeline_layers(126, 8)) == 126 and pipeline_layers(126, 8)[0] == 15
    assert pipeline_layers(48, 25) == (1, *(2,) * 23, 1)
    for chunks in (1, 3, 50):            # one chunk; 50 % 3 != 0; 50 / 50 = 1 would leave the ends no layer
        with pytest.raises(UserError) as exc:
            pipeline_layers(48, chunks)
        assert exc.value.key_path == "parallel.pipeline_layers"
    ctx = search_context(_22b())
    point = {"tp": 8, "cp": 1, "ulysses": 1, "pp": 2, "vpp": 1, "ep": 1, "schedule": "1f1b", "sp": True,
             "split": "embedding_loss", "recompute": "selective:core_attn,layernorm", "sharding": "none",
             "tp_comm_overlap": True, "offload": "none", "micro_batch": 1, "gpus": 8}
    parallel = parallel_of(point, ctx.space)
    assert parallel["pipeline_layers"] == (24, 24) and parallel["recompute"] == "selective"
    assert parallel["recompute_modules"] == ("core_attn", "layernorm") and parallel["tp_comm_overlap"] is True


def test_tp_comm_overlap_wins_by_hand():
    """22B on one DGX A100 80GB, tp 8 with sequence parallelism, pp 1, 4 micro-batches of 2,048 tokens: the plan
    with TP communication overlapped with the GEMMs beats the same plan without it by the hidden part of its
    forward TP collectives.

    Each layer's forward runs 2 TP regions (attention and MLP), each an all-gather of its sequence-parallel input
    and a reduce-scatter of its output, of 2,048 x 6,144 x 2 B = 25,165,824 B over 8 GPUs: 130.504 us each
    (``simulator collective --system dgx_a100_80gb --op all_gather|reduce_scatter --ranks 8 --bytes 25165824``:
    ring, simple protocol). With overlap the GEMM window (longer than the 261 us) hides them, and a hidden second
    still costs ``overlap_interference`` = 0.67 of a second (simulator/pricing/data/overlap.yaml), so each saves
    (1 - 0.67) of its time; the backward's TP collectives overlap the GEMMs either way. One stage and no recompute
    of TP ops (selective: core attention only), so the step falls by
    48 layers x 4 micro-batches x 2 regions x 0.33 x 261.008 us = 33.0749 ms, all of it exposed TP time.
    """
    result = search(_22b(tp=[8], pp=[1], micro_batch=[1], recompute=["selective"], recompute_modules=[["core_attn"]],
                         sharding=["none"], schedule=["1f1b"], split=["uniform"]) | {"training": {
                             **read_document(ROOT / "scenarios" / "korthikanti_22b.yaml").data["training"],
                             "global_batch": 4}})
    assert result.valid == 2
    winner, runner_up = result.plans
    assert winner["tp_comm_overlap"] is True and runner_up["tp_comm_overlap"] is False
    hand = 48 * 4 * 2 * (1 - 0.67) * 2 * 130.504e-6
    assert runner_up["step_s"] - winner["step_s"] == pytest.approx(hand, rel=1e-6)
    assert runner_up["exposed_tp_s"] - winner["exposed_tp_s"] == pytest.approx(hand, rel=1e-6)
    assert winner["compute_s"] == runner_up["compute_s"]
    line = why(winner, runner_up)
    assert "tp_comm_overlap False -> True" in line and "the largest difference is exposed tp" in line
    assert "-33.1 ms" in line


def test_tp_comm_overlap_collapses_at_tp_1_and_pins():
    result = search(_22b(tp=[1, 8], pp=[1, 2], micro_batch=[1], recompute=["full"], sharding=["none"],
                         schedule=["1f1b"], split=["uniform"]))
    seen = {(p["tp"], p["tp_comm_overlap"]) for p in result.plans}
    assert (1, True) not in seen and (8, True) in seen and (8, False) in seen
    data = _22b(tp=[8], pp=[1], micro_batch=[1], recompute=["full"], sharding=["none"], schedule=["1f1b"])
    data["parallel"] = {"tp_comm_overlap": True}
    assert {p["tp_comm_overlap"] for p in search(data).plans} == {True}


def _replay_space() -> dict:
    """22B on one DGX A100 80GB, 32 sequences per step: 1F1B and the replay-only zero-bubble and V schedules."""
    data = _22b(tp=[2, 4, 8], pp=[2, 4], micro_batch=[1, 2], recompute=["selective", "full"],
                recompute_modules=[["core_attn"]], sharding=["none", "zero1"], split=["uniform"],
                schedule=["1f1b", "zb1p", "zbv", "dualpipev"])
    data["training"]["global_batch"] = 32
    return data


def test_the_bound_is_below_every_replayed_step():
    from simulator.schedule.step import finish_step, prepare_step, replay_timelines
    from simulator.search.bound import step_lower_bound
    from simulator.search.evaluate import resolve
    from simulator.search.run import candidates

    ctx = search_context(_replay_space())
    points, _ = candidates(ctx, 10**6)
    checked = 0
    for point in points:
        if point["schedule"] == "1f1b":
            continue
        try:
            plan = resolve(ctx, point)
        except UserError:
            continue
        parts = prepare_step(ctx.fixed.model, plan, ctx.topology, moe=ctx.fixed.moe, cache=ctx.step_cache)
        step = finish_step(parts, replay_timelines(parts), comm_table=False)
        assert step_lower_bound(parts) <= step.step_s * (1 + 1e-12)
        # compute, recompute and the tail are parts of the breakdown: the bound is at most their sum plus bubble
        assert step_lower_bound(parts) >= step.compute_s + step.recompute_s
        checked += 1
    assert checked >= 20


def test_the_bound_keeps_the_first_plans_exact():
    data = _replay_space()
    exact = search(data, exact_top=None)
    for objective in ("step_time", "tokens_per_s_per_gpu"):
        full = search(data, exact_top=None, objective=objective)
        bounded = search(data, exact_top=3, objective=objective)
        assert [(tuple(p.values())) for p in bounded.plans[:3]] == [tuple(p.values()) for p in full.plans[:3]]
        pruned = bounded.rejected.get(BOUND_REASON, 0)
        # every plan the full search times is, in the bounded one, timed, pruned alone, or a point of a group the
        # bound pruned before resolving it (those points include rule and memory rejections too)
        assert pruned > 0 and bounded.valid + pruned <= full.valid <= bounded.valid + pruned + bounded.pruned_by_group_bound
        assert bounded.evaluated == full.evaluated
    assert {p["schedule"] for p in exact.plans} == {"1f1b", "zb1p", "zbv", "dualpipev"}
