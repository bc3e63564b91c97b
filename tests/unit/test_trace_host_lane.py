"""The Chrome trace shows host-bound time on a ``host`` lane (issue 28 item 2): a tiny dense model under the
hf_transformers profile is host-bound, each op's host wait is a bar on that lane and they add up to
``breakdown host``; with CUDA graphs there is no such lane."""

import pytest

from simulator.entries.simulate import simulate
from simulator.report.trace import chrome_trace
from simulator.scenario import load_scenario

MODEL = {"name": "tiny", "layers": 4, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 32000}


def _trace(launch: str):
    s = load_scenario({"system": {"profile": "h200_x2", "gpus": 1}, "model": MODEL, "parallel": {"tp": 1},
                       "training": {"seq_len": 128, "micro_batch": 1, "global_batch": 2,
                                    "framework": "hf_transformers", "host_launch": launch}})
    step = simulate(s).step
    return step, [e for e in chrome_trace(step)["traceEvents"] if e.get("ph") == "X"]


def test_the_host_lane_holds_the_host_wait():
    step, bars = _trace("eager")
    host = [e for e in bars if e["cat"] == "host"]
    assert step.host_s > 0 and len(host) == 4            # 2 micro-batches x forward and backward
    assert sum(e["dur"] for e in host) / 1e6 == pytest.approx(step.host_s, rel=1e-12)
    fwd, bwd = (sorted(e["dur"] for e in host if kind in e["name"]) for kind in ("fwd", "bwd"))
    assert fwd[0] == fwd[1] and bwd[0] == bwd[1] and bwd[0] > fwd[0]     # backward issues about twice the kernels
    _, graphs = _trace("cuda_graphs")
    assert not [e for e in graphs if e["cat"] == "host"]
