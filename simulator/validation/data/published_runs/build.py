"""Writes one scenario YAML per published run (runs.py), runs `simulator run FILE --json` on each and writes
runs.csv and results.csv (predicted vs measured). Run from the repository root:
    python simulator/validation/data/published_runs/build.py
Nothing here changes the simulator; it only records what it predicts today."""
from __future__ import annotations

import csv
import json
import statistics
import subprocess
from pathlib import Path

import yaml

from simulator.validation.data.published_runs.runs import HEADER
from simulator.validation.data.published_runs.runs import RUNS as FIRST_RUNS
from simulator.validation.data.published_runs.runs_flagperf_zoo import RUNS as FLAGPERF_ZOO_RUNS

HERE = Path(__file__).resolve().parent
RUNS = FIRST_RUNS + FLAGPERF_ZOO_RUNS

CSV_COLS = ["id", "group", "source", "source_locator", "gpu", "gpus", "nodes", "model", "params_B", "seq_len",
            "global_batch", "micro_batch", "tp", "pp", "vpp", "cp", "ep", "dp", "sp", "zero_or_distopt", "recompute",
            "precision", "measured_quantity", "measured_value", "measured_memory_GiB", "trained", "unsaid", "notes"]


def write_yaml(run: dict) -> Path:
    path = HERE / f"{run['id']}.yaml"
    head = "\n".join("# " + line for line in run["yaml_comment"].strip().splitlines())
    body = yaml.safe_dump(run["scenario"], sort_keys=False, default_flow_style=None, width=118)
    path.write_text(head + "\n" + body)
    return path


def simulate(path: Path) -> dict:
    p = subprocess.run(["simulator", "run", str(path), "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1]}
    return json.loads(p.stdout)


def main() -> None:
    with open(HERE / "runs.csv", "w", newline="") as f:
        f.write(HEADER)
        w = csv.DictWriter(f, fieldnames=CSV_COLS, extrasaction="ignore")
        w.writeheader()
        for run in RUNS:
            w.writerow(run)
    rows = []
    for run in RUNS:
        out = simulate(write_yaml(run))
        r = {"id": run["id"], "group": run["group"], "measured_step_s": run["measured_step_s"],
             "measured_memory_GiB": run.get("measured_memory_GiB", "")}
        if "error" in out:
            r.update(status="error", reason=out["error"])
        else:
            step = out["time"]["step_s"]
            r.update(status="oom" if out["memory"]["oom"] else "ok", predicted_step_s=round(step, 4),
                     signed_error=round(step / run["measured_step_s"] - 1, 4),
                     predicted_peak_GiB=round(out["memory"]["peak_bytes"] / 2**30, 1),
                     predicted_device_GiB=round(out["memory"]["device_peak_bytes"] / 2**30, 1),
                     hbm_GiB=round(out["memory"]["hbm_bytes"] / 2**30, 1),
                     predicted_mfu=round(out["throughput"]["mfu"], 3),
                     exposed_comm_s=round(sum(out["time"]["breakdown_s"]["exposed_comm"].values()), 3),
                     bubble_s=round(out["time"]["breakdown_s"]["bubble"], 3))
            if run.get("measured_memory_GiB") not in ("", None):   # nvidia-smi: the device, not the tensors
                r["memory_signed_error"] = round(r["predicted_device_GiB"] / float(run["measured_memory_GiB"]) - 1, 4)
        rows.append(r)
        print(r, flush=True)
    cols = ["id", "group", "status", "measured_step_s", "predicted_step_s", "signed_error", "measured_memory_GiB",
            "predicted_peak_GiB", "predicted_device_GiB", "memory_signed_error", "hbm_GiB", "predicted_mfu", "exposed_comm_s", "bubble_s",
            "reason"]
    with open(HERE / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    for g in ("dense", "fp8", "moe", "all"):
        errs = [r["signed_error"] for r in rows if "signed_error" in r and (g == "all" or r["group"] == g)]
        if errs:
            print(f"{g}: n={len(errs)} MAE={statistics.mean(abs(e) for e in errs):.3f} "
                  f"median signed={statistics.median(errs):+.3f} min={min(errs):+.3f} max={max(errs):+.3f}")


if __name__ == "__main__":
    main()
