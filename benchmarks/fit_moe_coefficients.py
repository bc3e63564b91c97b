"""Re-derive the FITTED entries of simulator/moe/coefficients.py from the DeepEP rows they were fitted on.

Run ``python benchmarks/fit_moe_coefficients.py``; it prints each fitted value next to the one in the table. Each
fit uses exactly one published row (noted); every other row of simulator/validation/data/deepep_v1.csv is a
prediction.
"""

from __future__ import annotations

from functools import cache
from math import log2

from simulator.collectives import placement_for_profile
from simulator.moe import DEFAULT_MOE_COEFFICIENTS as C0
from simulator.moe.kernels import deepep_normal, low_latency
from simulator.moe.routing import route

HIDDEN = 7168


def _bisect(f, lo, hi, target, increasing=True, iterations=60):
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if (f(mid) < target) == increasing:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@cache
def _normal_routing(ep):
    return route(4096, 8, 256, ep, node_limit=min(ep // 8, 4), seed=0)


def _normal_mean_GBps(ep, issue, qps, c):
    r = _normal_routing(ep)
    p = placement_for_profile("hgx_h800", ep)
    d = deepep_normal(r, p, HIDDEN, "fp8", issue, qps, c)
    cb = deepep_normal(r, p, HIDDEN, "bf16", issue, qps, c)
    return 0.5 * (d.bandwidth_Bps + cb.bandwidth_Bps) / 1e9


def fit() -> dict[str, float]:
    out = {}
    eff = _bisect(lambda e: _normal_mean_GBps(8, "cpu_proxy", 1, C0.model_copy(update={"normal_nvlink_efficiency": e})),
                  0.1, 1.0, (153 + 158) / 2)
    out["normal_nvlink_efficiency (normal EP8)"] = eff
    c = C0.model_copy(update={"normal_nvlink_efficiency": eff})
    for issue, qps, target in (("cpu_proxy", 1, (44 + 47) / 2), ("ibgda", c.normal_ibgda_qps, (58 + 57) / 2)):
        def bw(q, issue=issue, qps=qps):
            rates = {**c.qp_throughput_Bps, issue: q}
            return _normal_mean_GBps(32, issue, qps, c.model_copy(update={"qp_throughput_Bps": rates}))
        out[f"qp_throughput_Bps[{issue}] (normal{'_ibgda' if issue == 'ibgda' else ''} EP32)"] = _bisect(bw, 1e9, 1e12, target)
    r8 = route(128, 8, 288, 8, seed=0)
    base = low_latency(r8, placement_for_profile("hgx_h800", 8), HIDDEN, "fp8", "ibgda", None,
                       c=c.model_copy(update={"ll_latency_s": 0.0, "ll_per_node_hop_s": 0.0})).time_s
    out["ll_latency_s (low_latency EP8 dispatch, floor 0)"] = max(0.0, 163e-6 - base)
    r256 = route(128, 8, 512, 256, seed=0)
    c2 = c.model_copy(update={"ll_latency_s": out["ll_latency_s (low_latency EP8 dispatch, floor 0)"], "ll_per_node_hop_s": 0.0})
    t256 = low_latency(r256, placement_for_profile("hgx_h800", 256), HIDDEN, "fp8", "ibgda", None, c=c2).time_s
    out["ll_per_node_hop_s (low_latency EP256 dispatch)"] = max(0.0, (194e-6 - t256) / log2(32))
    return out


if __name__ == "__main__":
    for name, value in fit().items():
        print(f"{name:60s} {value:.4g}")
