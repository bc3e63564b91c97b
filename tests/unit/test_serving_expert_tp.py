"""Serving engines shard every expert over the TP ranks when expert parallelism is off (simulator/scenario/load.py
``_serving_expert_tp``): a MoE serving scenario that leaves ``parallel.etp`` unwritten gets etp = tp with ep 1.
Mixtral-8x7B's experts hold 3 x 4096 x 14336 = 176,160,768 parameters each, 8 per layer, 32 layers: 45.1e9 of the
model's 46.7e9; at tp 2 an engine holds half of them per GPU, where etp 1 held all of them on both GPUs."""

import pytest

from simulator.scenario import load_scenario

BASE = {"name": "mixtral-serve", "system": {"profile": "dgx_h100", "nodes": 1, "gpus": 2},
        "model": {"preset": "mixtral-8x7b"}, "training": {"mode": "inference", "precision": "bf16"},
        "serving": {"batch": 8, "input_len": 1024, "output_len": 128}}


def _plan(parallel: dict):
    return load_scenario({**BASE, "parallel": parallel}).plan


def test_unwritten_etp_follows_tp_when_ep_is_off():
    assert _plan({"tp": 2}).parallel.etp == 2
    assert _plan({"tp": 2, "ep": 2}).parallel.etp == 1     # expert parallelism on: experts whole on each rank
    assert _plan({"tp": 2, "etp": 1}).parallel.etp == 1    # written: kept
    assert _plan({"tp": 1}).parallel.etp == 1


def test_the_expert_weights_per_gpu_halve():
    from simulator.plan.params import stage_params

    sharded, replicated = stage_params(_plan({"tp": 2}), 0), stage_params(_plan({"tp": 2, "etp": 1}), 0)
    per_expert = 3 * 4096 * 14336
    assert replicated.expert == pytest.approx(8 * 32 * per_expert)
    assert sharded.expert == pytest.approx(replicated.expert / 2)
