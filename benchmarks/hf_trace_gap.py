"""Where the GPU time of a Hugging Face training step goes, class by class (issue 28): each Kineto trace of
simulator/validation/data/h200_traces summed per op class (benchmarks/trace_classes.py), beside what the
simulator's program prices for the same class (the scenario of benchmarks/hf_gap.py: ``framework: pytorch``,
pure bf16, one H200). Priced per micro-batch: the layer program times the layer count, the head and the embedding;
each memory-bound op at ``HBM bandwidth x memory_efficiency`` plus its launch. The optimizer is left to the
schedule's tail and not priced here.

    PYTHONPATH=. python benchmarks/hf_trace_gap.py [--trace NAME ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.hf_gap import DATA, MODELS, scenario_for  # noqa: E402
from benchmarks.trace_classes import CLASSES, trace_classes  # noqa: E402
from simulator import load_scenario  # noqa: E402
from simulator.compute.efficiency import default_efficiency  # noqa: E402
from simulator.compute.layer import fused_attention_seconds, memory_seconds  # noqa: E402
from simulator.pricing.compute import gemm_op_seconds  # noqa: E402
from simulator.program import embedding_program, head_program, plan_layer_program  # noqa: E402
from simulator.program.op_chains import CROSS_ENTROPY_BYTES  # noqa: E402

TRACES = ROOT / "simulator" / "validation" / "data" / "h200_traces"
#: memory-bound op name (its prefix) -> trace class
MEMOP_CLASS = {"norm": "rmsnorm", "final_norm": "rmsnorm", "bias_dropout_add": "residual", "activation": "swiglu",
               "rope": "rope", "eager.layout": "layout", "cross_entropy": "loss", "embedding": "embedding"}


def _memop_class(name: str) -> str:
    return next((c for p, c in MEMOP_CLASS.items() if name.startswith(p)), "other")


def priced_classes(run: dict) -> dict[str, float]:
    """Seconds the program prices per class for the case of ``run`` (one micro-batch = the step's)."""
    sc = load_scenario(scenario_for(run))
    rp = sc.plan
    gpu = sc.cluster.node.gpu
    eff = default_efficiency(gpu.architecture)
    dtype = rp.gemm_dtype(gpu)
    out = dict.fromkeys(CLASSES, 0.0)
    layer = plan_layer_program(rp, dtype, layer_index=0)
    head = head_program(rp.model, rp.shape, dtype, cross_entropy=CROSS_ENTROPY_BYTES[rp.recipe.cross_entropy])
    for program, count in ((layer, rp.model.layers), (head, 1), (embedding_program(rp.model, rp.shape), 1)):
        for o, t in zip(program.gemms, gemm_op_seconds(program.gemms, gpu, eff), strict=True):
            out["gemm fwd" if o.phase == "fwd" else "gemm bwd"] += count * t
        for o in program.memops:
            out[_memop_class(o.name)] += count * memory_seconds(o.bytes, 1, gpu, eff)
        a = program.attention
        if a is not None and a.fused:
            f, b = fused_attention_seconds(a.fwd_flops, a.bwd_flops, a.kernel, a.seq_len, a.dhead, gpu, eff, a.dtype)
            out["sdpa fwd"] += count * f
            out["sdpa bwd"] += count * b
    return out


def model_dims(name: str) -> dict:
    m = MODELS[name]
    return dict(h=m["hidden"], ffn=m["ffn_hidden"], vocab=m["vocab"], hd=m.get("head_dim", m["hidden"] // m["heads"]))


def gap_table(trace: str) -> list[tuple[str, float, float]]:
    """(class, measured s, priced s) for one trace file name."""
    run = next(json.loads(line) for line in DATA.read_text().splitlines() if f'"{trace}"' in line)
    measured, _ = trace_classes(TRACES / trace, model_dims(run["model"]))
    priced = priced_classes(run)
    return [(c, measured[c], priced[c]) for c in CLASSES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    named = sorted({json.loads(line).get("trace_file") for line in DATA.read_text().splitlines() if line.strip()} - {None})
    parser.add_argument("--trace", nargs="+", default=named, help="dense training traces that train.jsonl names")
    args = parser.parse_args()
    for trace in args.trace:
        rows = gap_table(trace)
        print(f"\n{trace}\n{'class':16s} {'meas ms':>8s} {'priced ms':>9s} {'ratio':>6s}")
        for c, m, p in rows:
            print(f"{c:16s} {m * 1e3:8.2f} {p * 1e3:9.2f} {m / p if p else float('nan'):6.2f}")
        print(f"{'total':16s} {sum(r[1] for r in rows) * 1e3:8.2f} {sum(r[2] for r in rows) * 1e3:9.2f}")


if __name__ == "__main__":
    main()
