"""The baseline gap on the H200 Hugging Face / timm training steps (issue 28): what the simulator predicts today
for each measured case of simulator/validation/data/h200_hf/train.jsonl (benchmarks/device/hf_train.py), against
the measured step time (median over 6 steps) and peak allocated memory.

Each case becomes the scenario a user would write today: one H200 (``h200_x2`` node, 1 GPU), the model's published
dims as an inline model block (hf_common.CONFIGS), ``framework: pytorch``, ``precision: pure_bf16`` (bf16
parameters, gradients and AdamW moments: torch.optim.AdamW keeps its state in the parameters' dtype),
``optimizer: adam``, global batch = micro-batch, ``recompute: full`` for ``gradient_checkpointing_enable()``.
Trainer rows (trainer.jsonl, benchmarks/device/hf_trainer.py: HF Trainer's defaults) are priced as
``precision: amp_bf16`` (fp32 parameters, gradients and AdamW moments, bf16 autocast). The ViT row is approximate (a bidirectional encoder priced as a 197-token transformer with learned positions and
a 1000-way head on every token; AMP: ``amp_bf16``). The host-bound probes (1x128) are listed too: there the GPU
idles and the step is the host's issue time.

    PYTHONPATH=. python benchmarks/hf_gap.py [--data FILE.jsonl ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from simulator import load_scenario, simulate  # noqa: E402
from simulator.validation import hf_train  # noqa: E402

DATA = hf_train.DATA / "train.jsonl"
TRAINER = hf_train.DATA / "trainer.jsonl"
#: inline model blocks: the published configs (one table: simulator/validation/hf_train.py MODELS)
MODELS = hf_train.MODELS


def scenario_for(run: dict) -> dict:
    """Today's scenario for a measured case, as priced before implementation profiles (``framework: pytorch``)."""
    return hf_train.scenario_for(run, "pytorch")


def gap_rows(paths: tuple[Path, ...] = (DATA, TRAINER)) -> list[dict]:
    rows = []
    runs = [json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip()]
    for run in runs:
        if run.get("section") not in ("dense", "moe", "vit", "trainer") or "step_s_median" not in run:
            continue
        scenario = scenario_for(run)
        result = simulate(load_scenario(scenario))
        measured_s, measured_b = run["step_s_median"], run["peak_allocated_bytes"]
        kind = "train" if run["section"] == "trainer" else run.get("case")
        rows.append({"case": scenario["name"], "kind": kind, "measured_ms": measured_s * 1e3,
                     "predicted_ms": result.step.step_s * 1e3, "time_error": result.step.step_s / measured_s - 1,
                     "host_ms": run.get("host_s_median", float("nan")) * 1e3,
                     "kernels": run.get("profile", {}).get("kernels", run.get("per_step_kernels")),
                     "measured_GiB": measured_b / 2**30, "predicted_GiB": result.memory.peak_bytes / 2**30,
                     "memory_error": result.memory.peak_bytes / measured_b - 1})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, nargs="+", default=[DATA, TRAINER])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = gap_rows(tuple(args.data))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'case':48s} {'meas ms':>8s} {'pred ms':>8s} {'err':>7s} {'host ms':>8s} {'kernels':>7s} "
          f"{'meas GiB':>8s} {'pred GiB':>8s} {'err':>7s}")
    for r in rows:
        print(f"{r['case']:48s} {r['measured_ms']:8.1f} {r['predicted_ms']:8.1f} {r['time_error']:+7.1%} "
              f"{r['host_ms']:8.1f} {int(r['kernels'] or 0):7d} {r['measured_GiB']:8.2f} {r['predicted_GiB']:8.2f} "
              f"{r['memory_error']:+7.1%}")
    train = [r for r in rows if r["kind"] == "train"]
    for key in ("time_error", "memory_error"):
        errs = sorted(abs(r[key]) for r in train)
        signed = sorted(r[key] for r in train)
        print(f"training cases ({len(train)}): {key} mean |err| {sum(errs) / len(errs):.1%}, "
              f"signed median {signed[len(signed) // 2]:+.1%}")


if __name__ == "__main__":
    main()
