"""Expert load from data (moe.histogram, moe.zipf_exponent) and EPLB's redundant experts (simulator/moe/eplb.py):
hand-computed loads, memory and located errors."""

import numpy as np
import pytest
import yaml

from simulator.cli import main
from simulator.errors import UserError
from simulator.memory.inference import inference_memory
from simulator.moe.eplb import eplb_slots, replicate
from simulator.pricing.groups import GroupTimer
from simulator.scenario import load_scenario
from simulator.topology import topology_of

WIDE_EP = "scenarios/serve_deepseek_v3_h200_wide_ep.yaml"


def wide_ep(moe: dict | None = None, **parallel) -> dict:
    with open(WIDE_EP) as f:
        data = yaml.safe_load(f)
    data["parallel"].update(parallel)
    data["moe"] = moe or {}
    return data


def routing(data):
    sc = load_scenario(data)
    return GroupTimer(sc.plan, topology_of(sc.cluster), moe=sc.moe).moe_routing(0)


def test_eplb_replicates_the_hottest_and_packs_the_ranks():
    """Loads 0.4/0.3/0.2/0.1, 2 redundant slots, EP 2: expert 0 (0.4) then expert 1 (0.3 > 0.2) get the copies;
    replicas 0.2, 0.2, 0.15, 0.15, 0.2, 0.1 packed heaviest first onto the lighter rank: {0.2, 0.2, 0.1} and
    {0.2, 0.15, 0.15}, 0.5 each, against 0.7 / 0.3 with experts 0-1 and 2-3 on the two ranks."""
    p = np.array([0.4, 0.3, 0.2, 0.1])
    assert replicate(p, 2).tolist() == [2, 2, 1, 1]
    placed = eplb_slots(p, 2, 2)
    assert placed.rank_load == pytest.approx([0.5, 0.5])
    assert sorted(placed.expert[:3].tolist()) == [0, 2, 3] and sorted(placed.expert[3:].tolist()) == [0, 1, 1]


def test_a_histogram_sets_the_rank_load():
    """DeepSeek-V3 (256 experts, top-8) on EP 32: the 8 experts of rank 0 carry 3 tokens for every 1 of the others;
    no expert saturates (8 x 3/272 < 1), so rank 0 gets 24/272 of the selections against a mean of 1/32:
    imbalance 24 x 32 / 272 = 2.8235. A flat histogram is uniform routing."""
    counts = [3.0] * 8 + [1.0] * 248
    assert routing(wide_ep({"distribution": "histogram", "histogram": counts})).imbalance == pytest.approx(
        24 * 32 / 272, rel=1e-9)
    flat = routing(wide_ep({"distribution": "histogram", "histogram": [5.0] * 256}))
    assert flat.rank_load == pytest.approx(routing(wide_ep()).rank_load, rel=1e-6)


def test_a_histogram_csv_relative_to_the_scenario(tmp_path):
    (tmp_path / "load.csv").write_text("# tokens per expert\ncount\n" + "3\n" * 8 + "1\n" * 248)
    data = wide_ep({"distribution": "histogram", "histogram": "load.csv"})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_scenario(str(path)).moe.histogram == tuple([3.0] * 8 + [1.0] * 248)
    assert routing(str(path)).imbalance == pytest.approx(24 * 32 / 272, rel=1e-9)


def test_redundant_experts_balance_the_hot_rank_and_cost_their_weights():
    """32 redundant experts under the histogram above: every hot expert gets copies, the busiest rank falls from
    2.82x to within one replica's share of the mean; each rank holds (256 + 32) / 32 = 9 experts instead of 8, so the
    expert weights per GPU grow by 9/8."""
    hot = {"distribution": "histogram", "histogram": [3.0] * 8 + [1.0] * 248}
    balanced = routing(wide_ep(hot, redundant_experts=32))
    slots = eplb_slots(np.array(hot["histogram"]) / 272, 32, 32)
    assert balanced.imbalance == pytest.approx(slots.rank_load.max() * 32, rel=1e-6)
    assert balanced.imbalance < 1 + slots.weights.max() * 32
    plain = inference_memory(load_scenario(wide_ep(hot)).plan).stages[0]
    more = inference_memory(load_scenario(wide_ep(hot, redundant_experts=32)).plan).stages[0]
    expert = {s: next(i.bytes for i in m.items if i.name == "weights.expert") for s, m in (("a", plain), ("b", more))}
    assert expert["b"] == pytest.approx(expert["a"] * 9 / 8, rel=1e-12)


@pytest.mark.parametrize(("moe", "parallel", "key", "words"), [
    ({"distribution": "histogram", "histogram": [1.0] * 255}, {}, "moe.histogram", "255 counts"),
    ({"distribution": "histogram", "histogram": [-1.0] + [1.0] * 255}, {}, "moe.histogram", ">= 0"),
    ({"distribution": "histogram", "histogram": [0.0] * 256}, {}, "moe.histogram", "positive total"),
    ({"distribution": "histogram"}, {}, "moe.histogram", "go together"),
    ({"distribution": "zipf", "zipf_exponent": -0.5}, {}, "moe.zipf_exponent", ""),
    ({}, {"redundant_experts": 20}, "parallel.redundant_experts", "276 slots"),
])
def test_bad_load_input_is_a_located_error(moe, parallel, key, words):
    with pytest.raises(UserError) as exc:
        load_scenario(wide_ep(moe, **parallel))
    assert key in str(exc.value) and words in str(exc.value)


def test_a_bad_histogram_file_exits_2(tmp_path, capsys):
    (tmp_path / "load.csv").write_text("1\n" * 100 + "-2\n")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(wide_ep({"distribution": "histogram", "histogram": "load.csv"})))
    assert main(["serve", str(path)]) == 2
    err = capsys.readouterr().err
    assert "load.csv" in err and "101" in err and "moe.histogram" in err
