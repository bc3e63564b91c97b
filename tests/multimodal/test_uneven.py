"""Uneven per-node splits (docs/multimodal.md): a submodule may take part of a node; the collectives of a submodule
spread unevenly are priced on their real split (NCCL: the node holding the fewest of its GPUs sets the ring's
channels and NIC share, the ring's steps and bytes are the real group's); traffic between submodules on NVLink
inside a node, on the NICs across nodes."""

import pytest

from simulator.collectives import build_cost_model, evaluate, place_group
from simulator.hardware import load_cluster
from simulator.multimodal.balance import balanced_splits
from simulator.multimodal.compose import pair_up
from simulator.multimodal.evaluate import PlanChoice, evaluate_submodule
from simulator.multimodal.placement import per_node_counts, place
from simulator.multimodal.spec import load_multimodal_preset
from simulator.pricing.exchange import pairs_exchange_s
from simulator.topology import Topology


@pytest.fixture(scope="module")
def eight():
    return Topology(load_cluster("dgx_a100_40gb", 8))


def test_packed_and_spread_placements_by_hand(eight):
    packed = place({"vision": 52, "text": 12}, 8, 8, "packed")
    assert packed == {"vision": tuple(range(52)), "text": tuple(range(52, 64))}
    assert per_node_counts(eight, packed["vision"]) == [8, 8, 8, 8, 8, 8, 4]    # half of node 6
    assert per_node_counts(eight, packed["text"]) == [4, 8]
    spread = place({"vision": 50, "text": 5, "decoder": 9}, 8, 8, "spread")
    # vision 50 = 6 per node + 2 extra (nodes 0, 1); text 5 = one on nodes 2-6; decoder 9 = one per node + node 7
    assert per_node_counts(eight, spread["vision"]) == [7, 7, 6, 6, 6, 6, 6, 6]
    assert [g // 8 for g in spread["text"]] == [2, 3, 4, 5, 6]
    assert per_node_counts(eight, spread["decoder"]) == [1, 1, 1, 1, 1, 1, 1, 2]
    assert sorted(sum(spread.values(), ())) == list(range(64))                  # every GPU once


def test_uneven_group_placed_on_its_real_split(eight):
    """53 GPUs as 6 whole nodes + 5 (no even stand-in: the old one priced 53 as 53 nodes of one GPU): 53 ranks over
    7 nodes, the emptiest node's 5 GPUs and their 5 NICs describe the per-node links. Plans outside the multimodal
    layer still refuse an uneven group."""
    from simulator.errors import UserError

    p = place_group(eight.on_real_split(), list(range(53)))
    assert (p.n_ranks, p.n_nodes, p.ranks_per_node, p.domain_ranks) == (53, 7, 5, (8, 8, 8, 8, 8, 8, 5))
    assert p.nics_per_node == 5 and p.max_ranks_per_node == 8
    with pytest.raises(UserError, match="spread unevenly"):
        place_group(eight, list(range(53)))
    assert place_group(eight.on_real_split(), list(range(48))).domain_ranks == ()     # an even group as before


def test_uneven_ring_all_reduce_by_hand(eight):
    """The ring all-reduce of the 53 GPUs, in its bandwidth regime (docs/collectives.md: per-rank wire bytes
    (2 (n - 1) + slack) / n per byte over the bottleneck link). The bottleneck is the node with 5 GPUs: 5 NICs of
    min(25 GB/s x 0.94 NIC efficiency, 31.51 GB/s PCIe x 0.762) = 23.5 GB/s each, 117.5 GB/s (channels: 2 per NIC x
    20.6 GB/s = 206 GB/s, not binding). Slope: (104 + 0.5) / 53 / 117.5e9 s per byte = 16.780 ps/B: 1 GiB more
    costs 18.018 ms (an even 48 GPUs on 8 NICs per node: (94 + 0.5) / 48 / 188e9 = 10.472 ps/B)."""
    p = place_group(eight.on_real_split(), list(range(53)))
    model = build_cost_model(p)
    a, b = evaluate(model, "all_reduce", [1 * 2**30, 2 * 2**30]).times_s
    slope = (104 + 0.5) / 53 / (5 * 23.5e9)
    assert (b - a) == pytest.approx(2**30 * slope, rel=1e-9)
    assert (b - a) * 1e3 == pytest.approx(18.018, abs=1e-3)
    even = build_cost_model(place_group(eight, list(range(48))))
    a8, b8 = evaluate(even, "all_reduce", [1 * 2**30, 2 * 2**30]).times_s
    assert (b8 - a8) == pytest.approx(2**30 * (94 + 0.5) / 48 / (8 * 23.5e9), rel=1e-9)


def test_uneven_submodule_is_priced_on_its_real_split(eight):
    """A 53-GPU image tower (6 nodes + 5 GPUs) runs; its DP all-reduce is the real group's (53 ranks, 7 nodes, the
    5-GPU node's NICs), as :func:`place_group` prices it on the real split."""
    spec = load_multimodal_preset("clip-vit-l14")
    gpus = tuple(range(53))
    run = evaluate_submodule(spec, spec.vision, PlanChoice(1, 1, 53, 64, "full"), gpus, eight, 32768)
    dp = [c for c in run.step.comm if c.dim == "dp"]
    assert dp and run.step_s > 0
    op = dp[0]
    expect = float(evaluate(build_cost_model(place_group(eight.on_real_split(), list(gpus))), op.op,
                            [op.bytes]).times_s[0])
    assert op.time_s == pytest.approx(expect, rel=1e-9)


def test_traffic_between_submodules_on_nvlink_inside_a_node_on_the_nic_across(eight):
    inside, link_in = pairs_exchange_s(eight, [(0, 1)], 64e6)
    across, link_out = pairs_exchange_s(eight, [(2, 9)], 64e6)
    assert link_in == "nvlink" and link_out == "network" and inside < across / 3
    both, link = pairs_exchange_s(eight, [(0, 1), (2, 9)], 64e6)
    assert link == "nvlink+network" and both == pytest.approx(across)   # the two classes at once: the slower


def test_pairs_prefer_a_partner_on_the_same_node(eight):
    # senders on nodes 0 and 1, receivers on node 1 then node 0: each sender gets the receiver of its own node
    assert pair_up(eight, [0, 8], [9, 1]) == [(0, 1), (8, 9)]
    # more senders than receivers: every receiver once, on its own node where it can
    assert pair_up(eight, [0, 1, 8, 9], [10]) == [(8, 10)]


def test_balanced_splits_follow_the_work_shares():
    """Work (GPU-seconds) 96 : 8 : 24 of 128 over 64 GPUs -> ideal 48, 4, 12; every split within 1 GPU of it that
    adds up."""
    class Run:
        def __init__(self, step_s, gpus):
            self.step_s, self.choice = step_s, PlanChoice(1, 1, gpus, 1)

    runs = {"vision": Run(2.0, 48), "text": Run(1.0, 8), "decoder": Run(3.0, 8)}
    splits = balanced_splits(64, runs, reach=1)
    assert (48, 4, 12) in splits and all(sum(x) == 64 for x in splits)
    assert {x[0] for x in splits} == {47, 48, 49} and {x[1] for x in splits} == {3, 4, 5}
    assert len(splits) == 9


def test_an_explicit_uneven_plan_runs_from_the_cli(tmp_path, capsys):
    """CoCa with its text halves on 6 and 10 GPUs (not multiples of the 8 nodes), spread over every node."""
    import json

    from simulator.cli import main

    path = tmp_path / "coca.yaml"
    path.write_text("system: {profile: dgx_a100_40gb, nodes: 8}\nmultimodal:\n  model: {preset: coca-vit-l14}\n"
                    "  global_batch: 8192\n  compare: false\n  placement: spread\n  plans:\n"
                    "    vision: {gpus: 48, micro_batch: 57, recompute: full}\n"
                    "    text: {gpus: 6, micro_batch: 64, recompute: full}\n"
                    "    decoder: {gpus: 10, micro_batch: 64, recompute: full}\n")
    assert main(["run", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["step"]["placement"] == "spread"
    assert [data["submodules"][n]["gpus"] for n in ("vision", "text", "decoder")] == [48, 6, 10]
    assert data["step"]["exchange_link"] in ("nvlink", "nvlink+network")
