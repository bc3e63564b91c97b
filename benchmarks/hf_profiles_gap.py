"""The H200 Hugging Face training steps priced with the implementation profiles (issue 28) beside the historical
``framework: pytorch``: the same scenarios as ``benchmarks/hf_gap.py`` (its ``scenario_for``), with
``training.framework`` set to the profile of the loop that ran: ``hf_transformers`` (plain loop, grouped_mm
experts), ``hf_per_expert_loop`` (OLMoE's eager per-expert loop), ``hf_trainer`` (Trainer rows).

    PYTHONPATH=. python benchmarks/hf_profiles_gap.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.hf_gap import DATA, TRAINER, scenario_for  # noqa: E402
from simulator import load_scenario, simulate  # noqa: E402


def profile_for(run: dict) -> str:
    """The implementation profile of the loop a measured row ran."""
    if run["section"] == "trainer":
        return "hf_trainer"
    if run["section"] == "moe" and run.get("experts_applied") not in (None, "grouped_mm"):
        return "hf_per_expert_loop"
    return "hf_transformers"


def rows() -> list[dict]:
    out = []
    for path in (DATA, TRAINER):
        for line in path.read_text().splitlines():
            run = json.loads(line) if line.strip() else {}
            if run.get("section") not in ("dense", "moe", "trainer") or "step_s_median" not in run:
                continue
            base = scenario_for(run)
            profiled = {**base, "training": {**base["training"], "framework": profile_for(run)}}
            old, new = (simulate(load_scenario(s)) for s in (base, profiled))
            measured = run["step_s_median"]
            out.append({"case": base["name"], "kind": "train" if run["section"] == "trainer" else run.get("case"),
                        "profile": profile_for(run), "measured_ms": measured * 1e3,
                        "pytorch_ms": old.step.step_s * 1e3, "profile_ms": new.step.step_s * 1e3,
                        "host_ms": new.step.host_s * 1e3,
                        "pytorch_error": old.step.step_s / measured - 1, "profile_error": new.step.step_s / measured - 1,
                        "peak_error": new.memory.peak_bytes / run["peak_allocated_bytes"] - 1})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    table = rows()
    if parser.parse_args().json:
        print(json.dumps(table, indent=1))
        return
    print(f"{'case':44s} {'profile':28s} {'meas':>7s} {'pytorch':>8s} {'profile':>8s} {'host':>7s} {'err':>7s}")
    for r in table:
        print(f"{r['case']:44s} {r['profile']:28s} {r['measured_ms']:7.1f} {r['pytorch_error']:+8.1%} "
              f"{r['profile_error']:+8.1%} {r['host_ms']:7.1f} {r['peak_error']:+7.1%}")
    train = [r for r in table if r["kind"] == "train"]
    for key in ("pytorch_error", "profile_error"):
        errs, signed = sorted(abs(r[key]) for r in train), sorted(r[key] for r in train)
        print(f"training cases ({len(train)}) {key}: mean |err| {sum(errs) / len(errs):.1%}, signed median "
              f"{signed[len(signed) // 2]:+.1%}")


if __name__ == "__main__":
    main()
