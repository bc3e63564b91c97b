"""Zero Bubble schedules (Qi et al. 2024, arXiv 2401.10241): ZB-H1 (zb1p) and ZB-V (zbv). By hand: the op orders
against the paper's ZB-H1 layout (Sec. 2.1, Fig. 3) and PyTorch's ZB-V order, the bubbles against the paper's
formulas, the in-flight closed forms against walks of the orders, the plan rules; end to end: a small dense plan
under 1f1b, zb1p and zbv, the CLI and the search."""

from __future__ import annotations

import json

import pytest
import yaml

from simulator import load_scenario, simulate
from simulator.cli import main
from simulator.errors import UserError
from simulator.model import load_model_preset
from simulator.plan import resolve_plan
from simulator.plan.params import stage_params
from simulator.plan.pipeline import in_flight, in_flight_walk, split_orders, stage_orders
from simulator.schedule.dual_timeline import PhaseCosts, run_dual_timeline
from simulator.schedule.timeline import run_timeline


def _row(ops) -> str:
    """One rank as the paper draws it: F/B/W and the micro-batch from 1; zbv's second chunk in lower case."""
    return " ".join(("FBW" if op.phase == 0 else "fbw")["FBW".index(op.kind)] + str(op.mb + 1) for op in ops)


def _costs(f: float, b: float, w: float) -> PhaseCosts:
    """Seconds of one chunk: forward f, input gradient b, weight gradient w (the full backward b + w)."""
    return PhaseCosts((f, f), (b + w, b + w), (w, w), (0.0, 0.0), (0.0, 0.0), (f, f), (b + w, b + w))


def _replay(schedule: str, pp: int, m: int, f: float, b: float, w: float):
    timelines = run_dual_timeline(split_orders(schedule, pp, m), [_costs(f, b, w)] * pp, 0.67)
    return max(t.end_s for t in timelines), timelines


def test_zb_h1_orders_are_the_paper_figure():
    """Fig. 3 (top) layout, p = 4, m = 8: worker i runs 1F1B's p-i-1 warm-up forwards and its first i weight
    gradients late (Sec. 2.1: the W passes start after the warm-up count), so worker 0 is 1F1B with each backward
    split in B W, and the last worker keeps three W for its cool-down."""
    expected = [
        "F1 F2 F3 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 F8 B5 W5 B6 W6 B7 W7 B8 W8",
        "F1 F2 F3 B1 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 F8 B6 W5 B7 W6 B8 W7 W8",
        "F1 F2 B1 F3 B2 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 F8 B7 W5 B8 W6 W7 W8",
        "F1 B1 F2 B2 F3 B3 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 F8 B8 W5 W6 W7 W8",
    ]
    assert [_row(o) for o in split_orders("zb1p", 4, 8)] == expected


def test_zb_v_orders_are_pytorchs():
    """pytorch/pytorch at 1fd7abc, ScheduleZBVZeroBubble, p = 4, m = 8: rank 0 runs 2p-1 = 7 forwards of its first
    chunk, p (f b w) of its second, then F B W f b w; the last rank alternates its chunks from the start (the V
    turns on it)."""
    rows = [_row(o) for o in split_orders("zbv", 4, 8)]
    assert rows[0] == ("F1 F2 F3 F4 F5 F6 F7 f1 b1 w1 f2 b2 w2 f3 b3 w3 f4 b4 w4 F8 B1 W1 f5 b5 w5 B2 W2 f6 b6 w6 "
                       "B3 W3 f7 b7 w7 B4 W4 f8 b8 w8 B5 W5 B6 W6 B7 W7 B8 W8")
    assert rows[3] == ("F1 f1 F2 f2 F3 f3 F4 f4 b1 w1 F5 B1 W1 f5 b2 w2 F6 B2 W2 f6 b3 w3 F7 B3 W3 f7 b4 w4 F8 B4 W4 "
                       "f8 b5 w5 B5 b6 B6 b7 B7 b8 B8 W5 w6 w7 w8 W6 W7 W8")


@pytest.mark.parametrize("schedule,pp,m", [("zb1p", 2, 2), ("zb1p", 4, 4), ("zb1p", 5, 13), ("zb1p", 8, 32),
                                           ("zbv", 2, 3), ("zbv", 3, 5), ("zbv", 4, 8), ("zbv", 8, 24)])
def test_every_chunk_runs_once_and_every_w_follows_its_b(schedule, pp, m):
    phases = (0,) if schedule == "zb1p" else (0, 1)
    for order in split_orders(schedule, pp, m):
        seen = [(op.kind, op.phase, op.mb) for op in order]
        assert sorted(seen) == sorted((k, ph, j) for k in "FBW" for ph in phases for j in range(m))
        for k, ph, j in seen:
            if k == "W":
                assert seen.index(("B", ph, j)) < seen.index(("W", ph, j))
            if k == "B":
                assert seen.index(("F", ph, j)) < seen.index(("B", ph, j))


@pytest.mark.parametrize("f,b,w", [(1.0, 1.0, 1.0), (1.0, 2.0, 0.7), (2.0, 1.0, 1.0), (1.0, 1.0, 0.3)])
@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 13), (8, 16)])
def test_zb_h1_bubble_is_the_paper_formula_and_below_1f1b(f, b, w, pp, m):
    """Sec. 2.1: ZB-H1 idles (p-1)(F + B - W), 1F1B (p-1)(F + B + W) with its backward B + W whole (Fig. 3: a third
    of it when F = B = W). The formula needs W <= B; with W > B the last rank's warm-up (p-1)F is the floor."""
    step, _ = _replay("zb1p", pp, m, f, b, w)
    assert step - m * (f + b + w) == pytest.approx((pp - 1) * (f + b - w), abs=1e-9)
    ref = run_timeline(stage_orders("1f1b", pp, 1, m), [[f]] * pp, [[b + w]] * pp, 0.0)
    assert max(t.end_s for t in ref) - m * (f + b + w) == pytest.approx((pp - 1) * (f + b + w), abs=1e-9)


@pytest.mark.parametrize("pp,m", [(2, 3), (3, 5), (4, 8), (4, 9), (8, 16)])
def test_zb_v_has_no_bubble_inside_a_rank_when_f_b_w_are_equal(pp, m):
    """Sec. 6: zero bubble when F = B = W. Rank i starts i chunk forwards late (the pipeline's fill) and then never
    waits: a parallelogram, each rank busy 6m chunk-units without a gap. The step here ends on the synchronous
    optimizer, so the slant (p-1) chunk forwards stays (the paper removes it with its optimizer post-validation,
    not modelled), still half ZB-H1's (p-1) stage forwards."""
    step, timelines = _replay("zbv", pp, m, 1.0, 1.0, 1.0)
    for i, t in enumerate(timelines):
        first = t.ops[0][3]
        assert first == pytest.approx(i) and t.wait_s == pytest.approx(first)
        assert t.end_s == pytest.approx(i + 6 * m)
    assert step - 6 * m == pytest.approx(pp - 1)
    h1, _ = _replay("zb1p", pp, m, 2.0, 2.0, 2.0)     # the same rank work as one stage (two chunks' worth)
    assert step - 6 * m < h1 - 6 * m


@pytest.mark.parametrize("schedule", ["zb1p", "zbv"])
@pytest.mark.parametrize("pp", [2, 3, 4, 8, 16])
def test_in_flight_closed_form_equals_the_walk(schedule, pp):
    """zb1p: 1F1B's min(p - i, m) (a split backward frees its micro-batch); zbv: p on every rank (2p half-rank
    chunks)."""
    low = pp if schedule == "zb1p" else 2 * pp - 1
    for m in range(low, 4 * pp + 2):
        for i in range(pp):
            assert in_flight(schedule, pp, 1, i, m) == in_flight_walk(schedule, pp, 1, i, m)
            if schedule == "zb1p":
                assert in_flight(schedule, pp, 1, i, m) == in_flight("1f1b", pp, 1, i, m)
    assert in_flight("zb1p", 4, 1, 0, 8) == 4.0 and in_flight("zb1p", 4, 1, 3, 8) == 1.0
    assert in_flight("zbv", 4, 1, 3, 8) == 4.0


def test_zb_v_puts_the_head_on_rank_0_and_zb_h1_keeps_1f1bs_placement():
    """ZB-V's V ends on rank 0 (last_stage_rank 0, as DualPipeV): the head (4096 x 128256 + 4096 for Llama-3-8B)
    moves there; one copy of the model either way."""
    model = load_model_preset("llama3-8b")
    train = {"global_batch": 64, "micro_batch": 1}
    plans = {s: resolve_plan(model, {"pp": 4, "schedule": s}, train, 8) for s in ("1f1b", "zb1p", "zbv")}
    assert plans["zbv"].last_stage_rank == 0 and plans["zb1p"].last_stage_rank == 3
    one = [stage_params(plans["1f1b"], s) for s in range(4)]
    assert [stage_params(plans["zb1p"], s) for s in range(4)] == one
    v = [stage_params(plans["zbv"], s) for s in range(4)]
    head = 4096 * 128256 + 4096
    assert v[0].dense == one[0].dense + head and v[3].dense == one[3].dense - head


@pytest.mark.parametrize("parallel,train,key,words", [
    ({"pp": 1, "schedule": "zb1p"}, {}, "parallel.pp", "needs a pipeline: pp >= 2, got pp = 1"),
    ({"pp": 1, "schedule": "zbv"}, {}, "parallel.pp", "needs a pipeline: pp >= 2, got pp = 1"),
    ({"pp": 4, "vpp": 2, "schedule": "zb1p"}, {}, "parallel.vpp", "one chunk per rank (1F1B's): vpp must be 1"),
    ({"pp": 4, "vpp": 2, "schedule": "zbv"}, {}, "parallel.vpp", "its own two chunks per rank: vpp must be 1"),
    ({"pp": 4, "schedule": "zb1p"}, {"global_batch": 3}, "training.global_batch",
     "needs at least pp = 4 micro-batches; the micro-batch count global_batch (3)"),
    ({"pp": 4, "schedule": "zbv"}, {"global_batch": 6}, "training.global_batch",
     "needs at least 2*pp-1 = 7 micro-batches"),
    ({"pp": 2, "schedule": "zbv"}, {"mode": "inference"}, "parallel.schedule", "training schedule"),
])
def test_rules_name_the_key_and_the_rule(parallel, train, key, words):
    with pytest.raises(UserError) as exc:
        resolve_plan(load_model_preset("llama3-8b"), parallel, {"micro_batch": 1, "global_batch": 16, **train},
                     parallel["pp"])
    assert exc.value.key_path == key
    assert words in exc.value.message


def test_the_fewest_micro_batches_run():
    for schedule, m in (("zb1p", 4), ("zbv", 7)):
        rp = resolve_plan(load_model_preset("llama3-8b"), {"pp": 4, "schedule": schedule},
                          {"micro_batch": 1, "global_batch": m}, 4)
        assert rp.num_microbatches == m


# --- end to end: Llama-3-8B on 2 DGX H100, TP 2, PP 4, DP 2, 16 micro-batches of 8k tokens ---------------------

SMALL = {"system": {"profile": "dgx_h100", "nodes": 2}, "model": {"preset": "llama3-8b"},
         "parallel": {"tp": 2, "pp": 4, "dp": 2, "distributed_optimizer": True},
         "training": {"seq_len": 8192, "global_batch": 32, "micro_batch": 1}}


def _with(schedule: str) -> dict:
    return {**SMALL, "parallel": {**SMALL["parallel"], "schedule": schedule}}


@pytest.fixture(scope="module")
def small():
    return {s: simulate(load_scenario(_with(s))) for s in ("1f1b", "zb1p", "zbv")}


def test_the_breakdown_adds_up_and_the_work_is_the_same(small):
    base = small["1f1b"].step
    for result in small.values():
        step = result.step
        parts = (step.compute_s + step.recompute_s + step.bubble_s + step.optimizer_s + step.host_s
                 + sum(step.exposed_comm_s.values()))
        assert parts == pytest.approx(step.step_s, rel=1e-9)
        assert step.hardware_flops_per_gpu == pytest.approx(base.hardware_flops_per_gpu, rel=1e-9)
        assert step.model_flops_per_gpu == pytest.approx(base.model_flops_per_gpu, rel=1e-9)


def test_zero_bubble_shrinks_the_bubble_and_the_step(small):
    """The same critical stage (the last, with the head) and its work for 1f1b and zb1p: the deferred W fill the
    cool-down, so only the bubble moves. zbv's V puts the head on rank 0, which starts first and never waits."""
    one, h1, v = (small[s].step for s in ("1f1b", "zb1p", "zbv"))
    assert h1.critical_stage == one.critical_stage
    assert h1.compute_s == pytest.approx(one.compute_s, rel=1e-12)
    assert h1.bubble_s < one.bubble_s and h1.step_s < one.step_s
    assert v.critical_stage == 0 and v.step_s < h1.step_s and v.bubble_s < h1.bubble_s
    assert v.exposed_comm_s["pp"] == pytest.approx(2 * one.exposed_comm_s["pp"], rel=1e-9)   # a V sends twice


def test_activations_follow_the_in_flight_counts(small):
    """zb1p holds 1F1B's activations on every stage (the deferred W's operands not counted); zbv pp micro-batches
    of a middle stage's layers, 1F1B's rank-0 count."""
    act = {s: [st.bucket("activations") for st in small[s].memory.stages] for s in small}
    assert act["zb1p"] == pytest.approx(act["1f1b"], rel=1e-12)
    assert act["zbv"][1] == pytest.approx(act["1f1b"][1] * 4 / 3, rel=1e-9)
    names = {s: [i for i in range(4) if "logits.fp32" in {x.name for x in small[s].memory.stages[i].items}]
             for s in small}
    assert names == {"1f1b": [3], "zb1p": [3], "zbv": [0]}


def test_cli_json_and_text(tmp_path, capsys):
    path = tmp_path / "zb.yaml"
    path.write_text(yaml.safe_dump(_with("zb1p")))
    assert main(["run", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["time"]["step_s"] > 0 and data["time"]["breakdown_s"]["bubble"] > 0
    assert main(["run", str(path)]) == 0
    assert "schedule zb1p;" in capsys.readouterr().out


def test_bad_plan_exits_2_naming_the_key(tmp_path, capsys):
    bad = _with("zbv")
    bad["parallel"]["vpp"] = 2
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    code = main(["run", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "parallel.vpp" in err and "vpp must be 1" in err and "Traceback" not in err


def test_search_runs_them_by_default_and_search_schedule_restricts(tmp_path, capsys):
    """Issue 30: the default space holds every registered schedule; ``search.schedule`` restricts it."""
    data = {k: v for k, v in SMALL.items() if k != "parallel"}
    data["parallel"] = {"tp": 2}
    data["search"] = {"pp": [4], "vpp": [1], "tp": [2], "micro_batch": [1], "sharding": ["distributed_optimizer"]}
    path = tmp_path / "search.yaml"

    def run() -> dict:
        path.write_text(yaml.safe_dump(data))
        assert main(["search", str(path), "--json", "--top", "10"]) == 0
        return json.loads(capsys.readouterr().out)

    assert {"zb1p", "zbv"} & {p["parallel"]["schedule"] for p in run()["plans"]}
    data["search"]["schedule"] = ["1f1b", "gpipe"]
    assert {p["parallel"]["schedule"] for p in run()["plans"]} <= {"1f1b", "gpipe"}
    data["search"]["schedule"] = ["zb1p", "zbv", "1f1b"]
    how = {p["parallel"]["schedule"]: p["timeline"] for p in run()["plans"]}
    # the top 10 may be all zero-bubble plans (the space's other knobs give each schedule several variants)
    assert {"zb1p", "zbv"} <= set(how) <= {"zb1p", "zbv", "1f1b"} and set(how.values()) == {"steady state"}



def test_v_schedules_put_the_head_and_mtp_layer_on_rank_0():
    """DeepSeek-V3 (61 layers + 1 MTP layer) on PP 16: the V schedules (DualPipeV, ZB-V) end on rank 0, so the MTP
    layer (index 61) and the loss join it; 1F1B and ZB-H1 keep them on the last rank."""
    model = load_model_preset("deepseek-v3")
    layers = [3] + [4] * 14 + [2]
    for schedule, rank in (("1f1b", 15), ("zb1p", 15), ("dualpipev", 0), ("zbv", 0)):
        rp = resolve_plan(model, {"pp": 16, "ep": 8, "schedule": schedule, "pipeline_layers": layers},
                          {"global_batch": 256, "micro_batch": 1}, 128)
        assert rp.last_stage_rank == rank and 61 in rp.stage_layers[rank]
        assert rp.holds_stage(rank, first=False) and rp.holds_stage(0, first=True)


def test_cli_trace_draws_the_deferred_weight_gradients(tmp_path, capsys):
    path, trace = tmp_path / "zbv.yaml", tmp_path / "trace.json"
    path.write_text(yaml.safe_dump(_with("zbv")))
    assert main(["run", str(path), "--trace", str(trace)]) == 0
    capsys.readouterr()
    events = json.loads(trace.read_text())
    names = {e.get("name", "") for e in (events["traceEvents"] if isinstance(events, dict) else events)}
    assert any(n.startswith("wgrad mb") for n in names) and any(n.startswith("bwd mb") for n in names)
