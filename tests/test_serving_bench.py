"""``serving.workload`` and ``simulator serve --bench`` (simulator/serving/bench.py) against hand-worked schedules."""

from pathlib import Path

import numpy as np
import pytest

from simulator.implementation.workload import Workload
from simulator.serving.bench import _stats, bench, workload_stream
from simulator.serving.loop import LoopCosts, LoopLimits, run_loop
from simulator.serving.rate import closed_loop_point, rate_point

MS = 1e-3
#: decode 10 ms a step whatever the batch; prefill 1 ms per token computed
FLAT = LoopCosts(decode_s=lambda seqs, context: 10 * MS, prefill_s=lambda seqs, new, past: seqs * new * MS)
ROOMY = LoopLimits(kv_blocks=10_000, block_tokens=1)
Q = ("mean", "p50", "p90", "p99")


def test_stats_of_repeated_values_are_numpy_percentiles_of_the_expanded_series():
    """Gaps 1 s x3 and 2 s x1 = the series [1, 1, 1, 2]: mean 1.25; p50 at index 1.5 -> 1; p90 at 2.7 -> 1 + 0.7 x
    (2 - 1) = 1.7; p99 at 2.97 -> 1.97."""
    st = _stats(np.array([2.0, 1.0]), np.array([1, 3]))
    assert [st[k] for k in Q] == pytest.approx([1.25, 1.0, 1.7, 1.97])
    assert _stats(np.zeros(0), np.zeros(0, int)) == {"mean": None, "p50": None, "p90": None, "p99": None}


def test_itl_and_tpot_of_the_preemption_schedule():
    """test_serving_loop's hand schedule (prompt 2, output 3, 6 one-token pages): A's tokens at 4, 14, 24 ms, B's at
    4, 14, 28 ms (preempted, recomputed in a 4 ms step). ITL pools the gaps [10, 10, 10, 14] ms: mean 11, p50 10, p90
    10 + 0.7 x 4 = 12.8, p99 13.88; TPOT per request (finish - first) / 2: A 10 ms, B 12 ms."""
    run = run_loop(np.zeros(2), 2, 3, FLAT, LoopLimits(kv_blocks=6, block_tokens=1))
    itl = _stats(*run.itl_s)
    assert [itl[k] for k in Q] == pytest.approx([11 * MS, 10 * MS, 12.8 * MS, 13.88 * MS])
    assert run.metrics(warmup=0.0)["tpot_mean_s"] == pytest.approx(11 * MS)


def test_constant_arrivals_fixed_lengths_by_hand():
    """Constant arrivals at 2 requests/s (0.5, 1.0, 1.5, 2.0 s: vLLM waits one gap before each request), prompt 100,
    output 5: each request runs alone, so TTFT = 100 ms prefill, four 10 ms decode gaps (ITL = TPOT = 10 ms), e2e =
    140 ms. The run lasts 2.0 + 0.14 = 2.14 s: 4 / 2.14 requests/s and 20 / 2.14 output tokens/s."""
    w = Workload(arrival={"process": "constant", "rate": 2.0})
    b = bench(w, input_len=100, output_len=5, num_requests=4, replicas=1, base=Path("."), costs=FLAT, limits=ROOMY)
    assert b["duration_s"] == pytest.approx(2.14)
    assert b["request_throughput"] == pytest.approx(4 / 2.14)
    assert b["output_tokens_per_s"] == pytest.approx(20 / 2.14)
    for key, value in (("ttft_s", 0.1), ("tpot_s", 0.01), ("itl_s", 0.01), ("e2e_s", 0.14)):
        assert [b[key][k] for k in Q] == pytest.approx([value] * 4)


def test_default_workload_is_the_loop_with_every_request_at_zero():
    """No workload: fixed serving lengths, all requests at t = 0 (vllm bench serve --request-rate inf): the same
    TTFT / TPOT / e2e as the loop run directly, over every request."""
    b = bench(None, input_len=30, output_len=4, num_requests=20, replicas=1, base=Path("."), costs=FLAT,
              limits=LoopLimits(kv_blocks=200, block_tokens=1))
    m = run_loop(np.zeros(20), 30, 4, FLAT, LoopLimits(kv_blocks=200, block_tokens=1)).metrics(warmup=0.0)
    for name in ("ttft", "tpot", "e2e"):
        assert b[f"{name}_s"]["mean"] == pytest.approx(m[f"{name}_mean_s"])
        assert b[f"{name}_s"]["p90"] == pytest.approx(m[f"{name}_p90_s"])
    # and the throughput simulate_closed_loop (vllm bench serve --max-concurrency 20 --num-prompts 20) reports
    closed = closed_loop_point(20, 20, replicas=1, gpus=1, input_len=30, output_len=4, costs=FLAT,
                               limits=LoopLimits(kv_blocks=200, block_tokens=1))
    assert b["output_tokens_per_s"] == pytest.approx(closed["tokens_per_s"])


def test_prefix_hits_skip_prefill_of_whole_pages():
    """Prompt 64, pages of 16, hit rate 0.6: 38.4 cached tokens round down to 32 (two pages); the prefill computes
    the other 32 tokens on 32 cached ones: TTFT 32 ms. Hit rate 1: all but the last page (48 tokens) is cached."""
    seen = []

    def prefill(seqs, new, past):
        seen.append((new, past))
        return seqs * new * MS

    costs = LoopCosts(decode_s=FLAT.decode_s, prefill_s=prefill)
    limits = LoopLimits(kv_blocks=100, block_tokens=16)
    b = bench(Workload(prefix_hit_rate=0.6), input_len=64, output_len=2, num_requests=1, replicas=1, base=Path("."),
              costs=costs, limits=limits)
    assert seen == [(32, 32)]
    assert b["ttft_s"]["mean"] == pytest.approx(32 * MS)
    assert workload_stream(Workload(prefix_hit_rate=1.0), 64, 2, 1, 16, Path("."))[3].tolist() == [48]


def test_length_distributions_and_seed():
    """Uniform in [5, 7] stays in range; normal (mean 100, std 0) is 100 exactly; the same seed draws the same
    stream, another seed another one; lognormal's median is near the given one (2000 draws)."""
    w = Workload(input={"distribution": "uniform", "low": 5, "high": 7},
                 output={"distribution": "normal", "mean": 100, "std": 0}, arrival={"rate": 3.0}, seed=4)
    t, i, o, _ = workload_stream(w, 1, 1, 500, 16, Path("."))
    assert set(i.tolist()) == {5, 6, 7} and set(o.tolist()) == {100}
    assert t[-1] == pytest.approx(500 / 3) and t[0] > 0  # scaled so the last is n / rate, as vLLM does
    again = workload_stream(w, 1, 1, 500, 16, Path("."))
    assert np.array_equal(again[0], t) and np.array_equal(again[1], i)
    other = workload_stream(w.model_copy(update={"seed": 5}), 1, 1, 500, 16, Path("."))
    assert not np.array_equal(other[1], i)
    ln = Workload(input={"distribution": "lognormal", "median": 500, "sigma": 0.8})
    assert np.median(workload_stream(ln, 1, 1, 2000, 16, Path("."))[1]) == pytest.approx(500, rel=0.1)


def test_csv_lengths_and_times(tmp_path):
    """A lengths CSV with a header is used in order and repeated; a times CSV gives the arrivals and the count."""
    (tmp_path / "len.csv").write_text("# tokens\ninput,output\n10,2\n20,3\n")
    (tmp_path / "t.csv").write_text("# seconds\n0\n0.5\n2\n")
    w = Workload(lengths_csv="len.csv", arrival={"process": "csv", "path": "t.csv"})
    t, i, o, _ = workload_stream(w, 1, 1, 1000, 16, tmp_path)
    assert t.tolist() == [0, 0.5, 2] and i.tolist() == [10, 20, 10] and o.tolist() == [2, 3, 2]


SCENARIO = ("system: {profile: dgx_h100, nodes: 1}\nmodel: {preset: llama3-70b}\nparallel: {tp: 8}\n"
            "training: {mode: inference, precision: bf16}\nserving:\n  batch: 1\n  input_len: 512\n"
            "  output_len: 16\n  num_requests: 20\n  workload:\n")


@pytest.mark.parametrize("workload, line, key, rule", [
    ("    input: {distribution: zipf, value: 3}\n", 11, "serving.workload.input.distribution", "Input should be"),
    ("    input: {distribution: uniform, low: 3}\n", 11, "serving.workload.input", "missing high"),
    ("    output: {distribution: fixed, value: 3, sigma: 1}\n", 11, "serving.workload.output", "not sigma"),
    ("    arrival: {process: poisson, rate: -1}\n", 11, "serving.workload.arrival.rate", "greater than 0"),
    ("    arrival: {process: gamma, rate: 2}\n", 11, "serving.workload.arrival", "needs shape"),
    ("    prefix_hit_rate: 1.5\n", 11, "serving.workload.prefix_hit_rate", "less than or equal to 1"),
])
def test_bad_workload_keys_exit_2_with_file_line_key_and_rule(tmp_path, capsys, workload, line, key, rule):
    from simulator.cli import main

    path = tmp_path / "w.yaml"
    path.write_text(SCENARIO + workload)
    assert main(["serve", str(path), "--bench"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}" in err and key in err and rule in err


@pytest.mark.parametrize("text, line, rule", [("input,output\n10,2\n10,x\n", 3, "is not 2 number"),
                                              ("10,2\n0,4\n", 2, "whole token counts"),
                                              ("10,2,5\n", 1, "must be 2 finite")])
def test_bad_lengths_csv_names_its_file_and_line(tmp_path, capsys, text, line, rule):
    from simulator.cli import main

    (tmp_path / "len.csv").write_text(text)
    path = tmp_path / "w.yaml"
    path.write_text(SCENARIO + "    lengths_csv: len.csv\n")
    assert main(["serve", str(path), "--bench"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'len.csv'}:{line}" in err and "serving.workload.lengths_csv" in err and rule in err


def test_bench_json_has_the_contract_keys(tmp_path, capsys):
    import json

    from simulator.cli import main

    path = tmp_path / "w.yaml"
    path.write_text(SCENARIO + "    arrival: {process: constant, rate: 1}\n")
    assert main(["serve", str(path), "--bench", "--json"]) == 0
    b = json.loads(capsys.readouterr().out)["bench"]
    assert {"request_throughput", "output_tokens_per_s", "ttft_s", "tpot_s", "itl_s", "e2e_s"} <= set(b)
    # 20 requests at 1, 2, ..., 20 s, each alone: 20 s + one request's e2e; TPOT = ITL (every gap one decode step)
    assert b["duration_s"] == pytest.approx(20 + b["e2e_s"]["mean"])
    assert b["tpot_s"]["mean"] == pytest.approx(b["itl_s"]["mean"])


def test_decreasing_arrival_times_and_a_missing_csv(tmp_path, capsys):
    """Times must not decrease (the CSV's line is named); a CSV that does not exist is blamed on the scenario's key."""
    from simulator.cli import main

    (tmp_path / "t.csv").write_text("0\n2\n1\n")
    path = tmp_path / "w.yaml"
    path.write_text(SCENARIO + "    arrival: {process: csv, path: t.csv}\n")
    assert main(["serve", str(path), "--bench"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 't.csv'}:3: serving.workload.arrival.path: arrival time 1 s comes before" in err
    path.write_text(SCENARIO + "    lengths_csv: none.csv\n")
    assert main(["serve", str(path), "--bench"]) == 2
    assert f"{path}:11: serving.workload.lengths_csv:" in capsys.readouterr().err


def test_shared_prefix_groups_add_the_prefix_and_cache_it_after_each_groups_first_request():
    """2 groups x 64-token prefix, 100 own input tokens, pages of 16: every prompt is 164 tokens; requests 0 and 1
    (each group's first) compute all of it, requests 2.. find their group's 64 tokens (4 whole pages) cached."""
    w = Workload(shared_prefix={"groups": 2, "prefix_len": 64}, input={"distribution": "fixed", "value": 100})
    _, ins, _, cached = workload_stream(w, 1, 1, 5, 16, Path("."))
    assert list(ins) == [164] * 5
    assert list(cached) == [0, 0, 64, 64, 64]


def test_the_rate_curve_serves_the_workload():
    """``simulator serve`` without --bench: a point at 2 requests/s with the workload's constant arrivals (0.5, 1.0,
    ... s), input 100 and output 5 tokens, half of each prompt in the prefix cache (block 1: 50 tokens): each
    request runs alone, prefill 50 ms (TTFT), four 10 ms decodes (TPOT), e2e 90 ms; 5 output tokens per request."""
    w = Workload(input={"distribution": "fixed", "value": 100}, output={"distribution": "fixed", "value": 5},
                 prefix_hit_rate=0.5, arrival={"process": "constant", "rate": 1.0})
    point = rate_point(2.0, 10.0, replicas=1, gpus=1, input_len=7, output_len=3, num_requests=20, seed=0,
                       costs=FLAT, limits=ROOMY, workload=w)
    assert point["ttft_mean_s"] == pytest.approx(0.05) and point["ttft_p99_s"] == pytest.approx(0.05)
    assert point["tpot_mean_s"] == pytest.approx(0.01) and point["e2e_mean_s"] == pytest.approx(0.09)
    assert point["tokens_per_s"] == pytest.approx(2.0 * 5)


def test_a_csv_of_arrival_times_cannot_set_a_request_rate():
    from simulator.implementation.serving import ServingConfig

    with pytest.raises(ValueError, match="request_rate sets each point's arrival rate"):
        ServingConfig(batch=1, input_len=8, output_len=2, request_rate=(1.0,),
                      workload={"arrival": {"process": "csv", "path": "t.csv"}})
