"""Issue 31, Done-when 1: published whole-run figures reproduced by scenarios the model runs
(simulator/validation/data/whole_run_published.yaml, docs/whole_run.md "Validation").

Scored rows must be within 15%; a known miss is pinned at the model's honest value (so a change to the model shows
here) and must still miss (so a fix moves it to the scored rows)."""

from __future__ import annotations

import pytest
import yaml

from simulator.validation.whole_run import TOLERANCE, whole_run_rows

ROWS = {r.id: r for r in whole_run_rows()}
SCORED = [i for i, r in ROWS.items() if r.known_miss is None]
MISSES = [i for i, r in ROWS.items() if r.known_miss is not None]


@pytest.mark.parametrize("row_id", SCORED)
def test_published_figure_within_tolerance(row_id):
    row = ROWS[row_id]
    assert row.predicted == pytest.approx(row.published, rel=TOLERANCE), row.source


@pytest.mark.parametrize("row_id", MISSES)
def test_known_miss_at_its_honest_value(row_id):
    row = ROWS[row_id]
    assert row.predicted == pytest.approx(row.known_miss, rel=0.02)
    assert abs(row.error) > TOLERANCE
    assert row.reason


def test_kokolis_ettr_by_hand():
    """E[ETTR] of Kokolis et al.'s 16,000-GPU job by hand: 2000 nodes x 6.50e-3 per node-day = 13.0 failures a day,
    MTBF 6646 s; a failure costs the 300 s restart (u0) and half of a 3600 s interval; goodput = 1 - (300 + 1800)
    / 6646 = 0.684 (the in-memory save's 0.21 s stall and load change the fourth digit)."""
    mtbf = 86400 / (2000 * 6.50e-3)
    assert mtbf == pytest.approx(6646.15, rel=1e-5)
    assert ROWS["kokolis_ettr_16k_ckpt60"].predicted == pytest.approx(1 - (300 + 1800) / mtbf, rel=1e-3)
    assert ROWS["kokolis_ettr_16k_ckpt5"].predicted == pytest.approx(1 - (300 + 150) / mtbf, rel=1e-3)


def test_bloom_save_is_the_busiest_ranks_torch_save():
    """DeepSpeed's busiest rank: stage 1 of 12 (5 layers and the embedding) at TP 4, data-parallel rank 0.
    A layer has 12 h^2 + 13 h = 2,466,437,120 parameters (h = 14,336), 616.6e6 per TP rank; the embedding
    250,880 x 14,336 / 4 = 899.2e6; the rank writes 3.982e9 x (2 B bf16 weights + 12 B / 8 of the ZeRO-1 fp32
    master and moments) = 13.94 GB, at 0.646 GB/s: 21.58 s, above the aggregate 2.244 TiB / 300 GB/s = 8.22 s."""
    h = 14336
    params = 5 * (12 * h * h + 13 * h) / 4 + 250880 * h / 4
    assert params == pytest.approx(3.982e9, rel=1e-3)
    rank_bytes = params * (2 + 12 / 8)
    assert rank_bytes == pytest.approx(13.94e9, rel=1e-3)
    row = ROWS["bloom_checkpoint_save"]
    assert row.predicted == pytest.approx(rank_bytes / 0.646e9, rel=2e-3)
    aggregate = ROWS["bloom_checkpoint_size"].predicted * 2**40 / 3.0e11
    assert aggregate == pytest.approx(8.22, abs=0.01) and aggregate < row.predicted


def test_report_passes():
    from simulator.validation.reports import REPORTS

    report = REPORTS["whole_run"]()
    assert report.passed and report.gated
    assert len(report.rows) == len(ROWS)


#: the blocking path's per-tensor work at Llama-3-70B's count: (80 x 9 + 3) x 4 entries x 39.4 us = 0.1139 s
PER_TENSOR_S = 723 * 4 * 3.939e-5


def test_dcp_staging_is_the_copy_of_one_gpus_shard_and_its_tensors():
    """Llama3-70B's fp32 weights and Adam moments (12 B per parameter) over 1856 GPUs, copied into cached pinned
    buffers at the measured 0.875 of PCIe Gen5 x16 (16 lanes x 32 GT/s x 128/130 / 8 = 63.0 GB/s; 55.1 GB/s):
    846.6 GB / 1856 / 55.1 GB/s = 8.27 ms, plus 2,892 state-dict entries x 39.4 us = 0.114 s: 0.122 s."""
    row = ROWS["pytorch_dcp_async_staging_1856"]
    pcie_Bps = 16 * 32e9 * 128 / 130 / 8
    assert row.predicted == pytest.approx(846.6e9 / 1856 / (0.875 * pcie_Bps) + PER_TENSOR_S, rel=1e-3)
    assert row.predicted == pytest.approx(0.1222, abs=5e-4)


@pytest.mark.parametrize("staging, seconds", [
    # DCP's default stager (BlockingAsyncStager, cache_staged_state_dict=False): a fresh unpinned CPU state dict at
    # every save, 846.6 GB / 1856 / 1.20 GB/s = 0.380 s
    ("pageable", 846.6e9 / 1856 / 1.20e9 + PER_TENSOR_S),
    # cache_staged_state_dict=True, first save: pinned allocation (2.11 GB/s) then the cached copy (0.875 x PCIe)
    ("pinned", 846.6e9 / 1856 * (1 / 2.11e9 + 1 / (0.875 * 16 * 32e9 * 128 / 130 / 8)) + PER_TENSOR_S),
])
def test_dcp_staging_by_stager(staging, seconds):
    """The 1856-GPU row's scenario under DCP's other stagers (docs/whole_run.md, "DCP async staging"): both stay
    more than 15% below the blog's 0.78 s (the default stager: 0.494 s, -37%), so the row stays a known miss."""
    import yaml

    from simulator.entries.simulate import simulate
    from simulator.validation.whole_run import DATA, _scenario

    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    spec = {"base": "crusoe_h200_llama70b", "run": {"checkpoint": {"staging": staging}}}
    stall = simulate(_scenario(spec, data["bases"])).run.to_dict()["checkpoint"]["stall_s"]
    assert stall == pytest.approx(seconds, rel=2e-3)
    assert stall < 0.78 * (1 - TOLERANCE)


def test_dcp_blocking_is_bracketed_by_the_h200_measurement():
    """DCP async_save on the H200 (simulator/validation/data/h200_checkpoint/state_dict_cost.jsonl): at Llama-3-70B's
    723 parameters + 2,169 Adam tensors, building the state dicts costs under 20 us a tensor whatever the bytes, and
    the blocked save with DCP's default stager (0.54 GB) takes longer than the blog's 0.78 s, while the model's
    pageable copy of the row's 0.456 GB shard (0.380 s) is shorter: the published stall lies between the copy and
    the whole default path measured here (docs/whole_run.md, "DCP async staging")."""
    import json

    from simulator.validation.whole_run import DATA

    rows = [json.loads(line) for line in (DATA.parent / "h200_checkpoint" / "state_dict_cost.jsonl")
            .read_text().splitlines()]
    at = {(r["layers"], r["hidden"], r["part"]): r for r in rows}
    tensors = 723 + 2169
    small, large = at[(80, 256, "get_state_dict")], at[(80, 1024, "get_state_dict")]
    assert small["params"] == 723 and small["opt_state_tensors"] == 2169
    assert small["median_s"] / tensors < 20e-6 and large["median_s"] / tensors < 20e-6
    assert large["param_bytes"] / small["param_bytes"] > 20 and large["median_s"] / small["median_s"] < 1.5
    blocked = at[(80, 256, "async_save_blocking_incl_get_state_dict")]
    copy_only = 846.6e9 / 1856 / 1.20e9
    assert copy_only < 0.78 < blocked["min_s"]
    assert blocked["median_s"] == pytest.approx(1.615, abs=1e-3)


def test_node_failures_per_week_by_hand():
    """RSC-1's 6.50 failures per 1000 node-days: BLOOM's 48 nodes 48 x 7 x 6.5e-3 = 2.184 a week; OPT-175B's 124
    nodes 5.642 a week, against the paper's 'over 100 hosts' in 2 months (100 / 61 x 7 = 11.48)."""
    assert ROWS["bloom_interruptions_per_week"].predicted == pytest.approx(48 * 7 * 6.5e-3, rel=1e-9)
    assert ROWS["opt_hosts_cycled_per_week"].predicted == pytest.approx(124 * 7 * 6.5e-3, rel=1e-9)
    assert ROWS["opt_hosts_cycled_per_week"].published == pytest.approx(100 / 61 * 7, abs=0.03)


#: two rows can share one rate and both be within the tolerance only if their implied rates differ by less than this
BAND = (1 + TOLERANCE) / (1 - TOLERANCE)


def test_measured_mttf_from_the_measured_curve():
    """Kokolis et al.'s measured MTTF of 8-GPU jobs, 47.7 days, is one node's rate, 1 / 47.7 = 20.96 per 1000
    node-days; 128 nodes at that rate: 47.7 x 24 / 128 = 8.944 h against the measured 7.9 h (+13.2%)."""
    row = ROWS["kokolis_mttf_1k_measured"]
    assert row.known_miss is None
    assert row.predicted == pytest.approx(47.7 * 24 / 128, rel=1e-3)
    assert row.error == pytest.approx(0.132, abs=1e-3)


def test_no_one_node_rate_serves_the_measured_and_the_projected_mttf():
    """Per 1000 node-days: the measured points imply 1000 / 47.7 = 20.96 (8 GPUs) and 24000 / (7.9 x 128) = 23.73
    (1024 GPUs), the projections 24000 / (1.8 x 2048) = 6.51 and 24000 / (0.23 x 16384) = 6.37 (RSC-1's r_f, 6.50).
    Each pair agrees within the band (1.35), the two pairs differ 3.6x: the default table (r_f) serves the
    projections, the measured row takes its rate from the measured curve."""
    measured = 1000 / 47.7, 24000 / (7.9 * 128)
    projected = 24000 / (1.8 * 2048), 24000 / (0.23 * 16384)
    assert measured == pytest.approx((20.96, 23.73), abs=0.01)
    assert projected == pytest.approx((6.51, 6.37), abs=0.01)
    assert max(measured) / min(measured) < BAND and max(projected) / min(projected) < BAND
    assert measured[1] / projected[0] == pytest.approx(3.646, abs=1e-3) and measured[1] / projected[0] > BAND
    # the default rate on the measured row: 24 / (128 x 6.5e-3) = 28.85 h, +265%
    assert 24 / (128 * 6.5e-3) / 7.9 - 1 == pytest.approx(2.651, abs=1e-3)


def test_no_one_node_rate_serves_bloom_opt_and_kokolis():
    """The rates per 1000 node-days the interruption rows imply: BLOOM 1000 / (48 x 7) = 2.976, OPT-175B 100000 /
    (124 x 61) = 13.22 (a lower bound), against Kokolis' projected 6.51. Pairwise ratios 2.19, 2.03 and 4.44 all
    exceed the band (1.35), so one node rate puts at most one of the three within 15%. OPT's and Kokolis' scenarios
    share their component counts per node within 1%, so no table of component rates separates them either."""
    bloom, opt, kokolis = 1000 / (48 * 7), 100000 / (124 * 61), 24000 / (1.8 * 2048)
    assert (bloom, opt, kokolis) == pytest.approx((2.976, 13.22, 6.51), abs=0.005)
    assert kokolis / bloom == pytest.approx(2.188, abs=1e-3) and opt / kokolis == pytest.approx(2.030, abs=1e-3)
    assert min(kokolis / bloom, opt / kokolis, opt / bloom) > BAND
    # the bands of r within 15% (interruptions scale as r, MTTF as 1 / r) are disjoint
    bands = [(0.85 * bloom, 1.15 * bloom), (kokolis / 1.15, kokolis / 0.85), (0.85 * opt, 1.15 * opt)]
    assert [b for band in bands for b in band] == pytest.approx([2.530, 3.423, 5.661, 7.658, 11.24, 15.20],
                                                                abs=0.005)
    assert bands[0][1] < bands[1][0] and bands[1][1] < bands[2][0]
    from simulator.validation.whole_run import DATA, _scenario
    from simulator.wholerun.failures import component_counts

    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    per_node = {}
    for rid in ("opt_hosts_cycled_per_week", "kokolis_mttf_16k"):
        spec = next(r for r in data["rows"] if r["id"] == rid)["scenario"]
        scenario = _scenario(spec, data["bases"])
        counts = component_counts(scenario.cluster, scenario.gpus)
        per_node[rid] = {k: v / counts["host"] for k, v in counts.items()}
    opt_node, kokolis_node = per_node.values()
    assert opt_node.keys() == kokolis_node.keys()
    assert all(opt_node[k] == pytest.approx(kokolis_node[k], rel=0.01) for k in opt_node)
    # OPT's own logbook ('~2 machines go down every day', another source): 124 x 7 x 2 / 124 = 14.0 a week, above
    # the lower bound, +22% on the figure
    assert 7 * 2 / ROWS["opt_hosts_cycled_per_week"].published - 1 == pytest.approx(0.217, abs=1e-3)


def test_bloom_save_needs_an_unsourced_rate():
    """Within 15% of 40 s is 34.0 to 46.0 s: the busiest rank's 13.94 GB at 0.303 to 0.410 GB/s (47 to 63% of the
    measured 0.646 GB/s), or the 2.467 TB checkpoint at 53.6 to 72.6 GB/s (18 to 24% of Jean Zay's theoretical
    300 GB/s). The sourced rates give max(8.2, 21.6) = 21.6 s."""
    rank_bytes, total = 13.94e9, ROWS["bloom_checkpoint_size"].predicted * 2**40
    assert total == pytest.approx(2.467e12, rel=1e-3)
    low, high = 40 * (1 - TOLERANCE), 40 * (1 + TOLERANCE)
    assert (rank_bytes / high / 1e9, rank_bytes / low / 1e9) == pytest.approx((0.303, 0.410), abs=1e-3)
    assert (rank_bytes / high / 0.646e9, rank_bytes / low / 0.646e9) == pytest.approx((0.469, 0.635), abs=1e-3)
    assert (total / high / 1e9, total / low / 1e9) == pytest.approx((53.6, 72.6), abs=0.1)
    assert total / 300e9 == pytest.approx(8.22, abs=0.01)
    sourced = max(total / 300e9, rank_bytes / 0.646e9)
    assert ROWS["bloom_checkpoint_save"].predicted == pytest.approx(sourced, rel=2e-3) and sourced < low
