"""DeepEP's published numbers (VALIDATION_DATA/deepep_v1.csv) against the MoE model on ``hgx_h800``.

Routing follows DeepEP's tests: normal kernels 4096 tokens/rank, 256 experts, top-8, top-min(nodes, 4) node groups;
low-latency kernels 128 tokens/rank, top-8 over 288 experts (rounded up to a multiple of EP where 288 does not
divide: 320 at EP64, 384 at EP128, 512 at EP256), one sampled batch (seed 0). Rows marked FIT are the single row
each fitted coefficient was fitted on (benchmarks/fit_moe_coefficients.py); all other rows are predictions.
"""

from __future__ import annotations

from simulator.caching import memo
from simulator.collectives import placement_for_profile
from simulator.moe import CommSettings, ep_comm, route
from simulator.resources import commented_csv

TOLERANCE = 0.15
FIT_ROWS = {("normal", 8), ("normal", 32), ("normal_ibgda", 32), ("low_latency", 8), ("low_latency", 256)}


def published() -> list[dict]:
    from simulator.validation import VALIDATION_DATA

    return commented_csv(VALIDATION_DATA / "deepep_v1.csv")


@memo(maxsize=64, loaded=True)
def _routing(mode: str, ep: int):
    if mode == "low_latency":
        return route(128, 8, -(-288 // ep) * ep, ep, seed=0)
    return route(4096, 8, 256, ep, node_limit=min(ep // 8, 4), seed=0)


def model_row(mode: str, ep: int):
    """The model's dispatch and combine for one published row (mode normal, normal_ibgda or low_latency)."""
    settings = {"normal": CommSettings(backend="deepep_normal", transport="ibrc"),
                "normal_ibgda": CommSettings(backend="deepep_normal", transport="ibgda"),
                "low_latency": CommSettings(backend="deepep_low_latency", transport="ibgda")}[mode]
    routing = _routing("low_latency" if mode == "low_latency" else "normal", ep)
    return ep_comm(routing, placement_for_profile("hgx_h800", ep), 7168, settings)


def deepep_rows() -> list[dict]:
    """One dict per published number: mode, ep, phase, unit, published, model, error, link, fit/pred."""
    out = []
    for row in published():
        comm = model_row(row["mode"], int(row["ep"]))
        tag = "FIT" if (row["mode"], int(row["ep"])) in FIT_ROWS else "pred"
        for phase, kernel in (("dispatch", comm.dispatch), ("combine", comm.combine)):
            if row[f"{phase}_us"]:
                unit, pub, mod = "us", float(row[f"{phase}_us"]), kernel.time_s * 1e6
            else:
                unit, pub, mod = "GB/s", float(row[f"{phase}_GBps"]), kernel.bandwidth_Bps / 1e9
            out.append({"mode": row["mode"], "ep": int(row["ep"]), "phase": phase, "unit": unit, "published": pub,
                        "model": mod, "error": mod / pub - 1, "link": kernel.bottleneck,
                        "published_link": row["link"], "row": tag})
    return out
