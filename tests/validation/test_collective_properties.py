"""Hypothesis properties of the collective cost model over random placements and sizes."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.collectives import OPS, build_cost_model, busbw_factor, evaluate, placement_for_profile
from simulator.collectives.links import intra_bandwidth, net_node_bandwidth
from simulator.collectives.model import row_times

SYSTEMS = {"dgx_a100_80gb": 8, "dgx_h100": 8, "h200_x2": 2, "rtx3090_x4_pcie": 4, "a100_pcie_x2_nvlink": 2}


@st.composite
def placements(draw):
    system = draw(st.sampled_from(sorted(SYSTEMS)))
    gpus = SYSTEMS[system]
    multi = system in ("dgx_a100_80gb", "dgx_h100") and draw(st.booleans())
    rpn = draw(st.integers(1, gpus)) if multi else draw(st.integers(2, gpus))
    nodes = draw(st.integers(2, 16)) if multi else 1
    issue = draw(st.sampled_from(["cpu_proxy", "ibgda"]))
    return placement_for_profile(system, rpn * nodes, rpn, net_issue=issue)


SIZES = np.geomspace(8, 2**32, 40)


@settings(max_examples=60, deadline=None)
@given(placements(), st.sampled_from(OPS))
def test_time_non_decreasing_in_bytes(placement, op):
    times = row_times(build_cost_model(placement), op, SIZES)
    finite = np.isfinite(times[:, 0])
    assert np.all(np.diff(times[finite], axis=1) >= -1e-15)
    auto = evaluate(build_cost_model(placement), op, SIZES).times_s
    assert np.all(np.diff(auto) >= -1e-15)


@settings(max_examples=60, deadline=None)
@given(placements(), st.sampled_from(OPS), st.floats(1.01, 4.0))
def test_more_link_bandwidth_never_slower(placement, op, factor):
    faster = placement.model_copy(update={"intra_bw_Bps": placement.intra_bw_Bps * factor,
                                          "nic_bw_Bps": placement.nic_bw_Bps * factor,
                                          "pcie_bw_Bps": placement.pcie_bw_Bps * factor})
    base_model, fast_model = build_cost_model(placement), build_cost_model(faster)
    # every algorithm's own time, and the tuner's best (NCCL chooses by its tuner's terms, without the NVLS pipeline
    # fill), never grow with bandwidth
    base_rows, fast_rows = row_times(base_model, op, SIZES), row_times(fast_model, op, SIZES)
    finite = np.isfinite(base_rows)
    assert np.all(fast_rows[finite] <= base_rows[finite] * (1 + 1e-12))
    tuner_base, tuner_fast = (row_times(m, op, SIZES, fill=False).min(axis=0) for m in (base_model, fast_model))
    assert np.all(tuner_fast <= tuner_base * (1 + 1e-12))
    # the chosen time too, wherever the choice stays; where more bandwidth tips the tuner to NVLS, the priced time
    # may rise by that row's fill (NCCL's own behaviour: its tuner does not see the fill), never more
    base, fast = evaluate(base_model, op, SIZES), evaluate(fast_model, op, SIZES)
    same = (np.array(base.algorithms) == np.array(fast.algorithms)) & (np.array(base.protocols) ==
                                                                       np.array(fast.protocols))
    assert np.all(fast.times_s[same] <= base.times_s[same] * (1 + 1e-12))
    switched = ~same & (fast.times_s > base.times_s)
    assert all(a.startswith("nvls") for a in np.array(fast.algorithms)[switched])


@settings(max_examples=60, deadline=None)
@given(placements(), st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"]))
def test_busbw_within_link_capacity(placement, op):
    """Bus bandwidth never exceeds what a rank's links carry; NVLS (in-switch reduction) and the 2-node tree (each
    NIC carries half) are the documented exceptions, bounded by 2x."""
    model = build_cost_model(placement)
    link = intra_bandwidth(placement, model.coefficients) if placement.ranks_per_node > 1 else np.inf
    if placement.n_nodes > 1:
        link = min(link, net_node_bandwidth(placement, model.coefficients))
    ev = evaluate(model, op, SIZES)
    busbw = SIZES / ev.times_s * busbw_factor(op, placement.n_ranks)
    exempt = np.array([a in ("nvls", "nvls_tree", "tree") for a in ev.algorithms])
    assert np.all(busbw[~exempt] <= link * (1 + 1e-9))
    assert np.all(busbw[exempt] <= 2 * link * (1 + 1e-9))


@settings(max_examples=60, deadline=None)
@given(placements())
def test_all_reduce_not_faster_than_its_bounds(placement):
    """all_reduce >= min(reduce_scatter + all_gather, best tree/NVLS row), less what one fused kernel saves over
    two: one launch (the largest NCCL base latency) and one pipeline fill (slack * S/n over the bottleneck link)."""
    model = build_cost_model(placement)
    c = model.coefficients
    ar = evaluate(model, "all_reduce", SIZES).times_s
    rs_ag = evaluate(model, "reduce_scatter", SIZES).times_s + evaluate(model, "all_gather", SIZES).times_s
    link = intra_bandwidth(placement, c) if placement.ranks_per_node > 1 else np.inf
    if placement.n_nodes > 1:
        link = min(link, net_node_bandwidth(placement, c))
    saved = max(max(v) for v in c.base_latency_us.values()) * 1e-6 + c.ring_pipeline_slack * SIZES / (
        placement.n_ranks * link * min(c.protocol_efficiency.values()))
    rows = row_times(model, "all_reduce", SIZES)
    table = model.tables["all_reduce"]
    other = [i for i, a in enumerate(table.algorithms) if a in ("tree", "nvls", "nvls_tree") and not table.reasons[i]]
    bound = np.minimum(rs_ag - saved, rows[other].min(axis=0)) if other else rs_ag - saved
    assert np.all(ar >= bound * (1 - 1e-9))
