"""A co-design study on a local Ray cluster: the best plan of Llama-3-70B on 128 GPUs for each hardware option.

Hardware knobs (docs/search.md, "Co-design study"):
  - DGX H100 x 16: NIC bandwidth 200 / 400 / 800 Gb/s per GPU (the node profile's ``nics.bandwidth``, written to a
    copy of ``dgx_h100.yaml``) x fabric oversubscription 1 and 2 (``system.fabric``);
  - GB200 NVL72 trays x 32: NVLink domain size 8 / 16 / 32 / 64 GPUs (``system.nvlink_domain_nodes`` 2 / 4 / 8 / 16
    trays of 4 GPUs), TP up to 8.
Every option runs the whole plan search of ``scenarios/search_llama3_70b_h100.yaml`` (8K tokens, 512 sequences)
with ``--executor ray`` on ``ray.init(num_cpus=2)``; the study prints, per option, the candidates and valid plans,
the wall seconds, the best plan and its step time, then the measured core-seconds per candidate (2 cores x wall /
candidates, Ray overhead included) and the extrapolated cost of 10^8 candidates on N workers.
Run: ``python benchmarks/codesign_study.py [--workers 2]`` (needs ``pip install -e '.[ray]'``).
"""

from __future__ import annotations

import argparse
import copy
import re
import tempfile
import time
from pathlib import Path

from simulator.scenario.document import read_document
from simulator.search import search

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "search_llama3_70b_h100.yaml"
DGX = ROOT / "simulator" / "data" / "hardware_profiles" / "nodes" / "dgx_h100.yaml"


def _dgx_with_nics(folder: Path, gbps: int) -> str:
    """A copy of the DGX H100 node profile whose compute NICs run at ``gbps`` Gb/s (the knob; all else as shipped)."""
    text = DGX.read_text()
    text, n = re.subn(r"(\n  bandwidth: )400 Gb/s", rf"\g<1>{gbps} Gb/s", text)
    assert n == 1, "dgx_h100.yaml's NIC bandwidth line moved"
    text = text.replace("name: dgx_h100", f"name: dgx_h100_nic{gbps}")
    path = folder / f"dgx_h100_nic{gbps}.yaml"
    path.write_text(text)
    return str(path)


def options(folder: Path) -> list[tuple[str, dict, dict]]:
    """(label, system section, search section overrides) of every hardware option."""
    fabric = dict(read_document(DGX).data["fabric"])
    out = []
    for gbps in (200, 400, 800):
        for over in (1.0, 2.0):
            system = {"profile": _dgx_with_nics(folder, gbps), "nodes": 16,
                      "fabric": {**fabric, "oversubscription": over}}
            out.append((f"DGX H100 x16, NIC {gbps} Gb/s, oversubscription {over:g}", system, {}))
    for trays in (2, 4, 8, 16):
        system = {"profile": "gb200_nvl72", "nodes": 32, "nvlink_domain_nodes": trays}
        out.append((f"GB200 x32 trays, NVLink domain {4 * trays} GPUs", system,
                    {"tp": [1, 2, 4, 8], "tp_within_node": False}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="Ray CPUs (default 2)")
    args = parser.parse_args()
    import ray

    ray.init(num_cpus=args.workers, log_to_driver=False)
    warm = copy.deepcopy(read_document(SCENARIO).data)    # start the workers and import the simulator in them
    warm["search"] = {"pp": [4], "tp": [8], "micro_batch": [1]}
    start = time.perf_counter()
    search(warm, executor="ray")
    print(f"Ray start-up search (workers starting, imports): {time.perf_counter() - start:.1f} s", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, system, section in options(Path(tmp)):
            data = copy.deepcopy(read_document(SCENARIO).data)
            data["system"] = system
            data["search"] = {**(data.get("search") or {}), **section}
            start = time.perf_counter()
            result = search(data, executor="ray")
            wall = time.perf_counter() - start
            best = result.plans[0]
            plan = (f"tp {best['tp']} pp {best['pp']} vpp {best['vpp']} dp {best['dp']} mb {best['micro_batch']} "
                    f"{best['recompute']} {best['sharding']} {best['schedule']}")
            rows.append((label, result.evaluated, result.valid, wall, plan, best["step_s"], best["mfu"]))
            print(f"{label}: {result.evaluated:,} candidates, {result.valid:,} valid, {wall:.1f} s; best {plan}: "
                  f"{best['step_s']:.3f} s, MFU {best['mfu']:.3f}", flush=True)
    ray.shutdown()
    candidates = sum(r[1] for r in rows)
    wall = sum(r[3] for r in rows)
    per = args.workers * wall / candidates
    print("\n| hardware option | candidates | valid | wall (s) | best plan | step (s) | MFU |\n|---|---|---|---|---|---|---|")
    for label, n, v, w, plan, step, mfu in rows:
        print(f"| {label} | {n:,} | {v:,} | {w:.1f} | {plan} | {step:.3f} | {mfu:.3f} |")
    print(f"\n{len(rows)} options, {candidates:,} candidates in {wall:.1f} s on {args.workers} Ray CPUs: "
          f"{per * 1e6:.0f} core-us per candidate (Ray included)")
    for n in (2, 128, 1024, 8192):
        print(f"10^8 candidates on {n:,} workers: {1e8 * per / n / 60:,.1f} min (extrapolated, linear)")


if __name__ == "__main__":
    main()
