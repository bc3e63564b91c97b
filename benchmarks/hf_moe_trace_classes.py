"""Where the GPU time of a Hugging Face OLMoE layer goes, class by class (issue 28, h22): the Kineto traces of one
training step of OLMoE-1B-7B reduced to 4 layers (simulator/validation/data/h200_traces/olmoe_l4_*), each kernel of
the MoE block (router, token sort, experts, combine) tied to its launch and the aten ops / autograd node around it
(benchmarks/trace_classes.py's lookup) and summed per class, per layer (the 4 layers' sum / 4).

The block as transformers 5.17 writes it (OlmoeSparseMoeBlock; integrations/moe.py): the router linear, softmax,
topk; then ``grouped_mm``: argsort of the R = T x k expert ids, gather of the R rows, histc / cumsum offsets, an
out-of-range mask applied with ``masked_fill`` to the gathered rows and to both grouped GEMMs' outputs, SwiGLU on
the chunked gate/up output, the routing-weight multiply, the inverse-permutation gather and the sum over k;
``eager``: per expert hit, ``where`` on the one-hot mask (a device-to-host read of its size), ``item`` reads, the
gather, two dense GEMMs, SwiGLU, the weight multiply and ``index_add_`` into the output.

    PYTHONPATH=. python benchmarks/hf_moe_trace_classes.py
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.trace_classes import _GEMM, _events, _Ops  # noqa: E402

TRACES = ROOT / "simulator" / "validation" / "data" / "h200_traces"
FILES = {"grouped_mm": "olmoe_l4_grouped_mm_mb4_s1024.json.gz", "eager": "olmoe_l4_eager_mb4_s1024.json.gz"}
LAYERS = 4
T, K, H, F, E = 4096, 8, 2048, 1024, 64      # tokens, top-k, hidden, expert FFN width, experts
R = T * K
CLASSES = ("router gemm", "router", "routing index ops", "row gather/scatter", "masked_fill", "expert gemm", "expert activation",
           "weight/combine", "zero grads", "expert weight grad", "device-to-host")
DENSE_FIRST = {1, 4, 16, 128, 1024, 2048, 4096, 50304}
MOE_OPS = ("aten::_grouped_mm", "aten::index_add_", "aten::where", "aten::nonzero", "aten::one_hot", "aten::histc",
           "aten::sort", "aten::argsort", "aten::topk", "aten::softmax", "aten::_softmax", "aten::item",
           "aten::is_nonzero", "aten::masked_fill", "aten::masked_fill_", "aten::silu", "aten::floor_divide",
           "aten::cumsum", "aten::clamp_", "aten::ge", "aten::index", "aten::index_put_", "aten::eq")
MOE_NODES = ("SelectBackward", "GroupedMm", "MaskedFill", "IndexBackward", "IndexAdd", "SiluBackward", "SplitBackward", "TopkBackward",
             "SoftmaxBackward", "SumBackward1")


def _dims(ops) -> list[list[int]]:
    return [d for o in ops for d in o["args"].get("Input Dims", []) if isinstance(d, list) and d
            and all(isinstance(x, int) for x in d)]


def _moe_dims(d: list[int]) -> bool:
    """A tensor only the MoE block has: R routed rows, the top-k or expert axis, per-expert row counts."""
    if R in d or (len(d) >= 2 and K in d[:2] and T in d[:2]) or (len(d) == 3 and d[0] == E):
        return True
    if len(d) == 2 and E in d and 128 not in d and 1024 not in d:
        return True
    return len(d) == 2 and d[0] not in DENSE_FIRST and d[1] in (H, F, 2 * F)


def in_moe(names: list[str], ops: list[dict]) -> bool:
    if any("LogSoftmax" in n or "log_softmax" in n or "nll_loss" in n for n in names):
        return False   # the loss (ForCausalLMLoss), not the router
    if any(n.startswith(MOE_OPS) and n in MOE_OPS for n in names) or any(k in n for n in names for k in MOE_NODES):
        return True
    return any(_moe_dims(d) for d in _dims(ops))


def moe_class(kernel: str, names: list[str], ops: list[dict]) -> str:
    text = " ".join(names)
    dims = _dims(ops)
    if "DtoH" in kernel or "Device -> Pinned" in kernel or "Device -> Pageable" in kernel:
        return "device-to-host"
    if "SelectBackward" in text:
        return "expert weight grad"
    router = any(d in ([T, E], [E, H], [H, E], [E, T], [T, K]) for d in dims) or "aten::topk" in text \
        or "Topk" in text
    if any(k in kernel for k in _GEMM) or "_grouped_mm" in text and "prepare" not in kernel:
        return "router gemm" if router else "expert gemm"
    if router and "aten::index" not in text:
        return "router"
    if "asked" in text or "masked_fill" in text:
        return "masked_fill"
    if any(k in text for k in ("silu", "Silu", "SplitBackward")) or any(len(d) == 2 and d[1] == F and d[0] != T
                                                                         for d in dims):
        return "expert activation"
    if any(k in text for k in ("index_add", "IndexAdd", "IndexBackward", "aten::index")) and \
            any(len(d) == 2 and d[1] == H for d in dims):
        return "row gather/scatter"
    if "fill_" in text or "zero" in text or "Memset" in kernel:
        return "zero grads"
    if any(len(d) >= 2 and d[-1] == H for d in dims):
        return "weight/combine"
    return "routing index ops"


def attribute(path: Path) -> dict[tuple[str, str], list[float]]:
    """(class, phase) -> [kernels per layer, GPU seconds per layer] of the MoE block; ('non-moe', phase) the rest."""
    events = _events(path)
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    phases = [(e["ts"], e["ts"] + e["dur"], e["name"][6:]) for e in events
              if e.get("cat") == "user_annotation" and e["name"].startswith("phase:")]
    ops = _Ops(events)
    out = collections.defaultdict(lambda: [0.0, 0.0])
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy"):
            continue
        launch = launches.get(e["args"].get("correlation"))
        if launch is None:
            continue
        phase = next((n for lo, hi, n in phases if lo <= launch["ts"] <= hi), "?")
        if phase not in ("forward", "backward"):
            continue
        around = sorted(ops.around(launch["tid"], launch["ts"]), key=lambda o: (o["ts"], -o["dur"]))
        names = [o["name"] for o in around]
        aten = [o for o in around if o["name"].startswith("aten::")]
        cls = moe_class(e["name"], names, aten) if in_moe(names, aten) else "non-moe"
        slot = out[(cls, phase)]
        slot[0] += 1 / LAYERS
        slot[1] += e["dur"] * 1e-6 / LAYERS
    return dict(out)


#: classes priced as copy-equivalent bytes per unit (op_chains.HF_EXPERT_CHAINS): routed rows x hidden, tokens x
#: hidden (the router's softmax / topk), routed rows x expert FFN width (SwiGLU), expert parameters x local experts
UNITS = {"row": ("routing index ops", "row gather/scatter", "masked_fill", "weight/combine", "zero grads"),
         "token": ("router",), "act": ("expert activation",), "expert_param": ("expert weight grad",)}


def copy_rate() -> float:
    """Bytes per second of a memory-bound op on the H200 as the simulator prices it (HBM bandwidth x the Hopper
    table's memory_efficiency): the rate that turns a class's measured time into copy-equivalent bytes."""
    from simulator.compute.efficiency import default_efficiency
    from simulator.hardware.loader import load_gpu

    gpu = load_gpu("h200_sxm")
    return gpu.memory.bandwidth * default_efficiency(gpu.architecture).memory_efficiency


def fit_chain(impl: str) -> dict[str, float]:
    """Copy-equivalent bytes per unit (``UNITS``) of the block outside its GEMMs, forward and backward, from the
    trace of ``impl``: each unit's classes' seconds per layer x :func:`copy_rate` / the unit's element count
    (R = 32768, T = 4096, h = 2048, f = 1024, 64 experts of 3 x h x f parameters)."""
    table, rate = attribute(TRACES / FILES[impl]), copy_rate()
    count = {"row": R * H, "token": T * H, "act": R * F, "expert_param": E * E * 3 * H * F}
    out = {}
    for unit, classes in UNITS.items():
        for phase, key in (("forward", "fwd"), ("backward", "bwd")):
            sec = sum(table.get((c, phase), [0, 0])[1] for c in classes)
            out[f"{key}_{unit}"] = sec * rate / count[unit]
    return out


def main() -> None:
    for impl, name in FILES.items():
        table = attribute(TRACES / name)
        print(f"\n{name} (per layer; non-moe: the whole step / {LAYERS})")
        print(f"{'class':20s} {'fwd n':>7s} {'fwd us':>8s} {'bwd n':>7s} {'bwd us':>8s}")
        for c in CLASSES + ("non-moe",):
            f, b = table.get((c, "forward"), [0, 0]), table.get((c, "backward"), [0, 0])
            print(f"{c:20s} {f[0]:7.1f} {f[1] * 1e6:8.1f} {b[0]:7.1f} {b[1] * 1e6:8.1f}")
        for ph in ("forward", "backward"):
            moe = sum(v[1] for (c, p), v in table.items() if p == ph and c != "non-moe")
            mem = sum(v[1] for (c, p), v in table.items()
                      if p == ph and c not in ("non-moe", "expert gemm", "router gemm", "device-to-host"))
            print(f"  {ph}: MoE block {moe * 1e6:.1f} us, of which non-GEMM (router apart) {mem * 1e6:.1f} us")
        print("  copy-equivalent bytes per unit:", {k: round(v, 2) for k, v in fit_chain(impl).items()})


if __name__ == "__main__":
    main()
