"""Hugging Face's eager kernel chains (issue 28): the per-class GPU time of the H200 Kineto traces, the copy-
equivalent bytes fitted on Qwen2.5-0.5B and checked on Llama-3.2-1B, and the program ops that carry them."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.compute import default_efficiency
from simulator.hardware import load_gpu
from simulator.model import load_model_preset
from simulator.plan.shape import rank_shape
from simulator.pricing.compute import layer_time
from simulator.program import layer_program
from simulator.program.op_chains import EAGER_CHAINS

ROOT = Path(__file__).resolve().parents[2]
from benchmarks.trace_classes import trace_classes  # noqa: E402

TRACES = ROOT / "simulator" / "validation" / "data" / "h200_traces"
GPU, EFF = load_gpu("h200_sxm"), default_efficiency("hopper")
RATE = GPU.memory.bandwidth * EFF.memory_efficiency   # 4.8e12 B/s x 0.803 = 3.854e12 B/s
QWEN = dict(h=896, ffn=4864, vocab=151936, hd=64)     # Qwen2.5-0.5B config.json: 24 layers, 14 q / 2 kv heads
LLAMA = dict(h=2048, ffn=8192, vocab=128256, hd=64)   # Llama-3.2-1B config.json: 16 layers, 32 q / 8 kv heads


def _per_phase(name: str, dims: dict) -> dict[tuple[str, str], float]:
    _, rows = trace_classes(TRACES / name, dims)
    out: dict[tuple[str, str], float] = {}
    for cls, phase, _, sec in rows:
        out[(cls, phase)] = out.get((cls, phase), 0.0) + sec
    return out


@pytest.fixture(scope="module")
def qwen():
    return _per_phase("qwen2.5-0.5b_mb8_s2048.json.gz", QWEN)


@pytest.fixture(scope="module")
def llama():
    return _per_phase("llama-3.2-1b_mb8_s2048.json.gz", LLAMA)


def test_trace_classes_of_the_qwen_step(qwen):
    """Kernel time summed per class of the Qwen2.5-0.5B 8 x 2048 step (ms, read off the trace by
    benchmarks/hf_trace_gap.py): the eager chains are a third of the GPU time, as much as the GEMMs."""
    ms = {k: v * 1e3 for k, v in qwen.items()}
    assert ms[("rmsnorm", "fwd")] == pytest.approx(9.87, abs=0.01)
    assert ms[("rmsnorm", "bwd")] == pytest.approx(19.33, abs=0.01)
    assert ms[("rope", "fwd")] + ms[("rope", "bwd")] == pytest.approx(12.70, abs=0.01)
    assert ms[("swiglu", "fwd")] + ms[("swiglu", "bwd")] == pytest.approx(12.74, abs=0.01)
    assert ms[("gemm fwd", "fwd")] == pytest.approx(22.33, abs=0.01)
    assert sum(ms.values()) == pytest.approx(185.73, abs=0.01)


@pytest.mark.parametrize(("op", "cls", "count", "unit"), [
    ("norm1", "rmsnorm", 2 * 24 + 1, 16384 * 896),            # two RMSNorms a layer and the final one
    ("rope", "rope", 24, 16384 * (14 + 2) * 64),               # q and k rotated once a layer
    ("activation", "swiglu", 24, 16384 * 4864),
    ("bias_dropout_add.attn", "residual", 2 * 24, 16384 * 896),
])
def test_chains_are_the_qwen_trace_fit(qwen, op, cls, count, unit):
    """EAGER_CHAINS = kernel seconds x rate / (ops x elements), e.g. the RMSNorm forward: 9.87 ms x 3.854e12 B/s /
    (49 x 16384 x 896) = 52.9 B per element."""
    fwd, bwd, _ = EAGER_CHAINS[op]
    for value, phase in ((fwd, "fwd"), (bwd, "bwd")):
        assert qwen[(cls, phase)] * RATE / (count * unit) == pytest.approx(value, rel=0.01)


@pytest.mark.parametrize(("op", "cls", "count", "unit", "rel"), [
    ("norm1", "rmsnorm", 2 * 16 + 1, 16384 * 2048, 0.04),
    ("rope", "rope", 16, 16384 * (32 + 8) * 64, 0.04),
    ("activation", "swiglu", 16, 16384 * 8192, 0.04),
])
def test_chains_predict_the_llama_trace(llama, op, cls, count, unit, rel):
    """The Qwen fit carries to Llama-3.2-1B (hidden 2048, head dim 64) within 4% per class and phase."""
    fwd, bwd, _ = EAGER_CHAINS[op]
    for value, phase in ((fwd, "fwd"), (bwd, "bwd")):
        assert value * count * unit / RATE == pytest.approx(llama[(cls, phase)], rel=rel)


def test_eager_layer_prices_the_chains_by_hand():
    """Llama-3-70B's last layer at 4096 tokens, tp 4 with sequence parallelism: eager PyTorch (no amp) costs the
    non-eager layer plus the chains' extra bytes and the layout copies (16 + 16 B per token x hidden), one rate.
    Forward extra: 2 norms x (52.9 - 4) x 1024 x 8192 + 2 adds x (5.5 - 6) x 1024 x 8192 + SwiGLU (9.3 - 6) x 4096
    x 7168 + RoPE (52.4 - 4) x 4096 x (16 + 2) x 128 + layout 16 x 4096 x 8192 = 1.9026e9 B = 0.49362 ms."""
    m = load_model_preset("llama3-70b")
    sh = rank_shape(m, 4096, 1, tp=4, ep=1, sp=True)
    base = layer_time(m, sh, GPU, EFF, "bf16", layer_index=m.layers - 1, attention="sdpa")
    eager = layer_time(m, sh, GPU, EFF, "bf16", layer_index=m.layers - 1, attention="sdpa", eager=True)
    th, tf, tq = 1024 * 8192, 4096 * 7168, 4096 * 18 * 128
    fwd = 2 * 48.9 * th - 2 * 0.5 * th + 3.3 * tf + 48.4 * tq + 16 * 4096 * 8192
    bwd = 2 * 97.6 * th + 2 * 22.0 * th + 6.4 * tf + 65.2 * tq + 16 * 4096 * 8192
    launch = EFF.launch_s * 2      # the two layout ops are the eager program's only new kernels
    assert fwd == pytest.approx(1.9026e9, rel=1e-4)
    assert eager.fwd_s - base.fwd_s == pytest.approx(fwd / RATE + launch / 2, rel=1e-9)
    assert eager.bwd_s - base.bwd_s == pytest.approx(bwd / RATE + launch / 2, rel=1e-9)
    ops = {(o.name, o.phase): o for o in layer_program(m, sh, "bf16", layer_index=m.layers - 1, eager=True).memops}
    assert ops[("norm2", "bwd")].kernel == "chain" and ops[("norm2", "bwd")].bytes == pytest.approx(103.6 * th)
    amp = {(o.name, o.phase): o for o in layer_program(m, sh, "bf16", layer_index=m.layers - 1, eager=True,
                                                       amp=True).memops}
    assert amp[("bias_dropout_add.mlp", "bwd")].kernel == "fused" and amp[("norm1", "fwd")].kernel == "chain"


def test_layernorm_and_gelu_keep_the_fused_bytes():
    """A LayerNorm / GeLU model with dropout (GPT-3) keeps the fused bytes of its norms, activation and
    bias-dropout-adds under eager (the chains were measured on RMSNorm / SwiGLU layers without dropout)."""
    m = load_model_preset("gpt3-175b")
    sh = rank_shape(m, 2048, 1, tp=8, ep=1, sp=True)
    ops = {(o.name, o.phase): o for o in layer_program(m, sh, "bf16", layer_index=0, eager=True).memops}
    assert ops[("norm1", "fwd")].kernel == "fused" and ops[("activation", "fwd")].kernel == "fused"
    assert ops[("bias_dropout_add.mlp", "fwd")].kernel == "fused"
    assert ops[("norm1", "bwd")].bytes == 6 * sh.norm_tokens * m.hidden


def test_gpu_bound_hf_rows():
    """The GPU-bound Hugging Face rows (8 x 2048, checkpointing off, one H200; measured host time below the step):
    predicted step within 5% of the measured median (simulator/validation/data/h200_hf/train.jsonl). Predicted
    with the chains: 196.1, 335.8, 426.6 ms against 191.9, 321.1, 410.6 measured (without: 148.7, 263.8, 330.6)."""
    from benchmarks.hf_gap import gap_rows
    rows = {r["case"]: r for r in gap_rows() if r["kind"] == "train"}
    for case, measured, predicted in (("qwen2.5-0.5b-8x2048", 191.9, 196.1), ("llama-3.2-1b-8x2048", 321.1, 335.8),
                                      ("qwen2.5-1.5b-8x2048", 410.6, 426.6)):
        row = rows[case]
        assert row["measured_ms"] == pytest.approx(measured, abs=0.05)
        assert row["predicted_ms"] == pytest.approx(predicted, rel=0.02)
        assert abs(row["time_error"]) < 0.05
