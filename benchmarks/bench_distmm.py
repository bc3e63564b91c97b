"""CPU seconds of the DistMM comparison (simulator.validation.distmm.compare) per preset, as
tests/multimodal/test_distmm_paper.py runs it (13 DGX presets + 4 on AWS p4d), and a fingerprint of every result.

    PYTHONPATH=. python benchmarks/bench_distmm.py [--out results.json] [--only MODEL ...]

``--out`` writes each preset's uniform, monolithic and DistMM step times and every chosen submodule plan (repr of
the floats, so two runs can be compared bit for bit); docs/multimodal.md, "Cost of the search", quotes the times.
"""

from __future__ import annotations

import argparse
import json
import time

from simulator.validation.distmm import compare, paper


def fingerprint(r) -> dict:
    def runs(step):
        return {k: [repr(v.step_s), repr(v.device_peak_bytes), v.choice.to_dict(), list(v.gpus)]
                for k, v in step.runs.items()}
    return {"batch": r.batch, "uniform": repr(r.uniform.step_s), "monolithic": repr(r.monolithic.step_s),
            "distmm": repr(r.distmm.step_s), "placement": r.distmm.placement,
            "distmm_runs": runs(r.distmm), "uniform_runs": runs(r.uniform)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    p = paper()
    cases = [(m, p["comparison"]) for m in p["comparison"]["models"]] + \
            [(m, p["aws_comparison"]) for m in p["aws_comparison"]["models"]]
    out, total = {}, 0.0
    for m, cfg in cases:
        if a.only and m not in a.only:
            continue
        t = time.process_time()
        r = compare(m, cfg["profile"], cfg["nodes"], cfg["max_batch"])
        dt = time.process_time() - t
        total += dt
        out[f"{cfg['profile']}/{m}"] = fingerprint(r)
        print(f"{cfg['profile']:14s} {m:22s} {dt:7.2f} s CPU  distmm {r.distmm.step_s:.4f} s", flush=True)
    print(f"total {total:.2f} s CPU")
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
