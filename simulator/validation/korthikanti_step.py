"""Korthikanti et al. 2023 validation rows for the step-time engine (Table 5 end to end, Table 4 per layer).

Setup of the paper (Sec. 6, Table 3): Selene DGX A100 80GB nodes, seq 2048, vocab 51200, no data parallelism,
TP 8, the paper's PP / interleaving / batch sizes, Megatron's unfused (pre-flash) softmax attention, mixed
precision. Full recompute runs without SP; the other column is SP + selective recompute. One hardware profile
(``dgx_a100_80gb``) and the shipped coefficient tables: no per-row tuning.
"""

from __future__ import annotations

from pathlib import Path

from simulator.hardware import load_cluster
from simulator.model import load_model_preset
from simulator.plan import resolve_plan
from simulator.resources import commented_csv
from simulator.schedule.step import layer_step_times, simulate_step
from simulator.topology import Topology

_TABLE4 = {"baseline_no_recompute": (False, "none"), "sequence_parallel": (True, "none"),
           "full_recompute": (False, "full"), "selective_recompute": (False, "selective"),
           "selective_recompute_sequence_parallel": (True, "selective")}


def _read(path: str | Path) -> list[dict]:
    return commented_csv(Path(path))


def table5_rows(path: str | Path, profile: str = "dgx_a100_80gb") -> list[dict]:
    """Measured vs modelled iteration time of every Table 5 point."""
    out = []
    for r in _read(path):
        model = load_model_preset(f"korthikanti-{r['model'].lower()}")
        gpus = int(r["gpus"])
        topology = Topology(load_cluster(profile, nodes=gpus // 8))
        for mode, key in (("full", "iter_time_full_s"), ("sp_sel", "iter_time_sp_selective_s")):
            parallel = dict(tp=int(r["tp"]), pp=int(r["pp"]), vpp=int(r["virtual_stages"]), sp=mode == "sp_sel",
                            recompute="full" if mode == "full" else "selective")
            training = dict(seq_len=2048, micro_batch=int(r["micro_batch"]), global_batch=int(r["global_batch"]),
                            attention="unfused", precision="bf16")
            result = simulate_step(model, resolve_plan(model, parallel, training, gpus), topology)
            measured = float(r[key])
            out.append({"model": r["model"], "mode": mode, "measured_s": measured, "model_s": result.step_s,
                        "error": result.step_s / measured - 1, "mfu": result.mfu,
                        "published_mfu": float(r["mfu_sp_selective"]) if mode == "sp_sel" else None})
    return out


def table4_rows(path: str | Path, profile: str = "dgx_a100_80gb", efficiency=None) -> list[dict]:
    """Measured vs modelled forward and backward time of one 22B layer (h 6144, 64 heads, s 2048, b 4, TP 8)."""
    model = load_model_preset("korthikanti-22b")
    topology = Topology(load_cluster(profile, nodes=1))
    out = []
    for r in _read(path):
        sp, recompute = _TABLE4[r["experiment"]]
        plan = resolve_plan(model, dict(tp=8, sp=sp, recompute=recompute),
                            dict(seq_len=2048, micro_batch=4, global_batch=4, attention="unfused"), 8)
        fwd, bwd = layer_step_times(model, plan, topology, efficiency=efficiency)
        f_ms, b_ms = float(r["forward_ms"]), float(r["backward_ms"])
        out.append({"experiment": r["experiment"], "forward_ms": f_ms, "backward_ms": b_ms,
                    "model_forward_ms": fwd * 1e3, "model_backward_ms": bwd * 1e3,
                    "forward_error": fwd * 1e3 / f_ms - 1, "backward_error": bwd * 1e3 / b_ms - 1})
    return out
