"""Uneven per-node splits (docs/multimodal.md): a submodule may take part of a node; the collectives of a submodule
spread unevenly are priced on an even stand-in; traffic between submodules on NVLink inside a node, on the NICs
across nodes."""

import pytest

from simulator.collectives import build_cost_model, evaluate, place_group
from simulator.hardware import load_cluster
from simulator.multimodal.balance import balanced_splits
from simulator.multimodal.compose import pair_up
from simulator.multimodal.evaluate import PlanChoice, evaluate_submodule, p2p_s
from simulator.multimodal.placement import even_view, per_node_counts, place
from simulator.multimodal.spec import load_multimodal_preset
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


def test_even_view_by_hand(eight):
    # 52 GPUs as 6 whole nodes + 4: priced as 13 nodes of 4 (the fewest on one node sets a ring's NIC share)
    topo, gpus = even_view(eight, tuple(range(52)))
    assert topo.cluster.nodes == 13 and per_node_counts(topo, gpus) == [4] * 13
    # 50 GPUs as 7, 7, 6 x 6: the largest divisor of 50 not above 6 is 5: 10 nodes of 5
    spread = place({"vision": 50, "text": 14}, 8, 8, "spread")["vision"]
    topo, gpus = even_view(eight, spread)
    assert topo.cluster.nodes == 10 and per_node_counts(topo, gpus) == [5] * 10
    # 53 is prime: 53 nodes of one GPU (the pessimistic end, documented)
    assert even_view(eight, tuple(range(53)))[0].cluster.nodes == 53
    # an even set is priced where it is
    assert even_view(eight, tuple(range(48)))[0] is eight


def test_uneven_submodule_is_priced_on_its_stand_in(eight):
    """A 52-GPU image tower (6.5 nodes) runs; its DP all-reduce is the stand-in's: 52 ranks, 4 per node."""
    spec = load_multimodal_preset("clip-vit-l14")
    run = evaluate_submodule(spec, spec.vision, PlanChoice(1, 1, 52, 64, "full"), tuple(range(52)), eight, 32768)
    dp = [c for c in run.step.comm if c.dim == "dp"]
    assert dp and run.step_s > 0
    topo, gpus = even_view(eight, tuple(range(52)))
    placement = place_group(topo, list(gpus))
    assert placement.n_ranks == 52 and placement.ranks_per_node == 4
    op = dp[0]
    expect = float(evaluate(build_cost_model(place_group(topo, list(gpus), concurrent_groups=())), op.op,
                            [op.bytes]).times_s[0])
    assert op.time_s == pytest.approx(expect, rel=1e-9)


def test_traffic_between_submodules_on_nvlink_inside_a_node_on_the_nic_across(eight):
    inside, link_in = p2p_s(eight, [(0, 1)], 64e6)
    across, link_out = p2p_s(eight, [(2, 9)], 64e6)
    assert link_in == "nvlink" and link_out == "network" and inside < across / 3
    both, link = p2p_s(eight, [(0, 1), (2, 9)], 64e6)
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
