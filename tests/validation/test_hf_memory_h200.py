"""Peak memory of Hugging Face Transformers training steps on one H200 against the plain-PyTorch lifetimes of
issue 28 item 3 (``training.gradient_lifetime: per_layer``, ``training.loss_implementation: hf_fp32``).

Measured by h15 (branch h15, commit df6ab57: h200_hf/train.jsonl in the validation data, measured
with the device script hf_train.py): torch 2.11, transformers 5.17, models built from their published config.json with random weights,
bf16 parameters, sdpa attention, ``torch.optim.AdamW(fused=True)`` (bf16 moments), the loop ``loss = model(
input_ids=x, labels=x).loss; loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)``, gradient
checkpointing off and on (``model.gradient_checkpointing_enable()``); ``torch.cuda.max_memory_allocated`` over the
timed steps. Nothing was fitted to these runs: both terms come from reading PyTorch's autograd and transformers'
ForCausalLMLoss (docs/memory_features.md); the runs check them. The accounting before them was +6.7% to +32.7% high (the
checkpointed runs +32%).
"""

import json
from pathlib import Path

import pytest

from simulator.memory import estimate_memory
from simulator.model import ModelSpec
from simulator.plan import resolve_plan

#: dimensions as in each model's config.json on the Hugging Face Hub (h15's device script hf_common.py, CONFIGS)
MODELS = {
    "qwen2.5-0.5b": ModelSpec(name="qwen2.5-0.5b", layers=24, hidden=896, heads=14, kv_heads=2, ffn_hidden=4864,
                              vocab=151936, activation="swiglu", norm="rmsnorm", tied_embeddings=True, qkv_bias=True),
    "llama-3.2-1b": ModelSpec(name="llama-3.2-1b", layers=16, hidden=2048, heads=32, kv_heads=8, head_dim=64,
                              ffn_hidden=8192, vocab=128256, activation="swiglu", norm="rmsnorm",
                              tied_embeddings=True),
    "qwen2.5-1.5b": ModelSpec(name="qwen2.5-1.5b", layers=28, hidden=1536, heads=12, kv_heads=2, ffn_hidden=8960,
                              vocab=151936, activation="swiglu", norm="rmsnorm", tied_embeddings=True, qkv_bias=True),
}

#: (model, micro-batch, sequence, checkpointing, peak allocated bytes), train.jsonl at h15 df6ab57
MEASURED = [
    ("qwen2.5-0.5b", 4, 1024, False, 16198362624),
    ("qwen2.5-0.5b", 4, 1024, True, 10732119552),
    ("qwen2.5-0.5b", 8, 2048, False, 55623722496),
    ("qwen2.5-0.5b", 8, 2048, True, 33752974848),
    ("llama-3.2-1b", 4, 1024, False, 20981243392),
    ("llama-3.2-1b", 4, 1024, True, 14127218176),
    ("llama-3.2-1b", 8, 2048, False, 61462453760),
    ("llama-3.2-1b", 8, 2048, True, 34046385664),
    ("qwen2.5-1.5b", 4, 1024, False, 28723585536),
    ("qwen2.5-1.5b", 4, 1024, True, 17205613056),
    ("qwen2.5-1.5b", 8, 2048, False, 86881559040),
    ("qwen2.5-1.5b", 8, 2048, True, 40818127360),
]
TOLERANCE = 0.05   # issue 28: memory features pin a measured peak within 5%
DATA = Path(__file__).resolve().parents[2] / "simulator" / "validation" / "data" / "h200_hf" / "train.jsonl"


def predicted_peak(model: str, micro_batch: int, seq: int, checkpointing: bool) -> float:
    rp = resolve_plan(MODELS[model], {"recompute": "full" if checkpointing else "none"},
                      {"seq_len": seq, "micro_batch": micro_batch, "global_batch": micro_batch,
                       "framework": "pytorch", "precision": "pure_bf16", "gradient_lifetime": "per_layer",
                       "loss_implementation": "hf_fp32"}, 1)
    return estimate_memory(rp).peak_bytes


@pytest.mark.parametrize("model, micro_batch, seq, checkpointing, measured", MEASURED)
def test_hf_peak_within_5_percent(model, micro_batch, seq, checkpointing, measured):
    """Predicted -0.4% to -1.0% with checkpointing, -1.9% to -3.0% without (peak at the loss in every run)."""
    err = predicted_peak(model, micro_batch, seq, checkpointing) / measured - 1
    assert abs(err) <= TOLERANCE, f"{model} {micro_batch}x{seq} ckpt={checkpointing}: {err:+.1%}"


def test_the_pinned_values_are_the_measured_file():
    """Once h15's data is merged, the numbers above must be the file's."""
    if not DATA.exists():
        pytest.skip("the h200_hf measurements arrive with branch h15")
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    got = [(r["model"], r["micro_batch"], r["seq"], r["checkpointing"], r["peak_allocated_bytes"])
           for r in rows if r.get("section") == "dense" and r.get("case") == "train"]
    assert got == MEASURED
