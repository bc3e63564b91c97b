"""Host-bound timing (issue 28 item 2): a stream segment between two device-to-host syncs costs
max(GPU work, host issue time); hand calculations on a tiny dense model with the hf_transformers profile."""

import pytest

from simulator.compute.layer import LayerTime
from simulator.entries.simulate import simulate
from simulator.report.trace import chrome_trace
from simulator.scenario import load_scenario
from simulator.schedule.costs import Cost, _host, settle_host

MODEL = {"name": "tiny", "layers": 4, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 32000}
K = 30e-6           # hf_transformers host.per_kernel_s (simulator/implementation/profiles/hf_transformers.yaml)


def _step(mb: int, seq: int, launch: str):
    s = load_scenario({"system": {"profile": "h200_x2", "gpus": 1}, "model": MODEL, "parallel": {"tp": 1},
                       "training": {"seq_len": seq, "micro_batch": mb, "global_batch": 2 * mb,
                                    "framework": "hf_transformers", "host_launch": launch}})
    return simulate(s).step


def test_a_host_bound_step_is_the_host_issue_time():
    eager, graphs = _step(1, 128, "eager"), _step(1, 128, "cuda_graphs")
    # per micro-batch: 4 layers x (41 forward + 83 backward kernels) + 53 outside the layers, 30 us each;
    # the GPU needs ~0.6 ms of it, so the host sets the pace: 2 micro-batches x 16.47 ms
    host_issue = 2 * (4 * (41 + 83) + 53) * K
    assert eager.step_s - eager.optimizer_s == pytest.approx(host_issue, rel=1e-9)
    assert eager.host_s == pytest.approx(host_issue - graphs.compute_s, rel=1e-9)
    assert eager.compute_s == graphs.compute_s and graphs.host_s == 0.0
    # the fused AdamW issues 5.2e-8 kernels per parameter (~1 kernel here): the GPU's update is longer
    assert eager.optimizer_s == graphs.optimizer_s
    lanes = {e["cat"] for e in chrome_trace(eager)["traceEvents"] if e.get("ph") == "X"}
    assert "host" in lanes


def test_a_gpu_bound_step_has_no_host_time():
    eager, graphs = _step(8, 4096, "eager"), _step(8, 4096, "cuda_graphs")
    # 8 x 4096 tokens: each layer's forward takes longer on the GPU than 41 x 30 us on the host
    assert eager.host_s == 0.0 and eager.step_s == graphs.step_s


def test_the_host_runs_ahead_between_syncs():
    """Two layers, 1 ms of host issue each, 0.5 ms and 2 ms of GPU work: without a sync the host runs ahead of
    the first layer's GPU work into the second's, the segment takes max(2.5, 2) ms: no wait; a sync in each
    layer makes each its own segment: 0.5 ms of waiting in the first."""
    for synced, wait in ((False, 0.0), (True, 0.5e-3)):
        chunk = Cost()
        for gpu in (0.5e-3, 2e-3):
            layer = Cost(compute=gpu)
            _host(layer, 1e-3, synced)
            chunk.add(layer)
        assert settle_host(chunk).host == pytest.approx(wait, abs=1e-15)


def test_layer_time_carries_sync_counts_with_defaults_that_keep_the_per_layer_rule():
    assert LayerTime(1.0, 2.0).host_syncs_fwd == 1.0
