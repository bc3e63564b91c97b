"""Count what autograd keeps for backward in one eager layer, tensor by tensor, on the CPU.

``torch.autograd.graph.saved_tensors_hooks`` sees every tensor an op saves; the bytes are summed over distinct
storages (a view saved twice, or the SDPA output that o_proj reads as a view, counts once), parameters and their
autocast copies (a parameter's shape, bf16, under autocast) left out. Units: T*h bytes (T tokens, h hidden), so that the numbers compare with
simulator/memory/activations.py's per-layer formulas. Cases:

* ``hf``: one Hugging Face decoder layer (Qwen2 dims shrunk: h 256, 4 heads, 4 K/V heads, SwiGLU 512), pure bf16 or
  under ``torch.autocast(bfloat16)`` with fp32 parameters and an fp32 input (the residual stream of AMP);
* ``gpt``: benchmarks/device/memory_features.py's plain GPT block (LayerNorm, fused qkv, GeLU 4h), AMP;
* ``moe``: an OLMoE MoE block (8 experts, top-2, expert FFN 96) with ``experts_implementation`` eager or grouped_mm.

The rotary cos / sin are passed in from outside the layer, so two [b, s, d] tensors of them show in ``hf`` (in a
model they are computed once and shared by every layer). Needs torch and transformers (the /work/venv-torch
environment):

    /work/venv-torch/bin/python benchmarks/saved_tensors_count.py hf bf16
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "device"))
B, S, H = 16, 128, 256
T = B * S


def saved_bytes(run, params, amp: bool) -> Counter:
    """(dtype, shape of the saved view) -> bytes of distinct storages saved while ``run()`` executes."""
    skip = {p.untyped_storage().data_ptr() for p in params}
    weight_shapes = {s for p in params for s in (tuple(p.shape), tuple(p.shape)[::-1])}
    seen: dict[int, tuple[int, str]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        cast = amp and t.dtype == torch.bfloat16 and tuple(t.shape) in weight_shapes
        if storage.data_ptr() not in skip and not cast and storage.nbytes() >= T:
            seen[storage.data_ptr()] = (storage.nbytes(), f"{t.dtype} {tuple(t.shape)}")
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    out: Counter = Counter()
    for nbytes, label in seen.values():
        out[label] += nbytes
    return out


def hf_layer(amp: bool):
    from hf_common import CONFIGS
    from transformers import AutoConfig, AutoModelForCausalLM
    dims = dict(CONFIGS["qwen2.5-0.5b"], hidden_size=H, intermediate_size=2 * H, num_hidden_layers=1,
                num_attention_heads=4, num_key_value_heads=4, head_dim=64, vocab_size=512)
    config = AutoConfig.for_model(dims.pop("model_type"), **dims)
    dtype = torch.float32 if amp else torch.bfloat16
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    layer = model.model.layers[0]
    x = torch.randn(B, S, H, dtype=dtype, requires_grad=True)
    rope = model.model.rotary_emb(x, torch.arange(S)[None].expand(B, -1))
    return (lambda: layer(x, position_embeddings=rope, attention_mask=None)), model.parameters()


def gpt_block():
    from memory_features import Block  # noqa: I001
    block = Block(argparse.Namespace(hidden=H, heads=4, ffn=4 * H, activation="gelu", fp8_store=False))
    x = torch.randn(B, S, H, requires_grad=True)
    return (lambda: block(x)), block.parameters()


def moe_block(impl: str):
    from hf_common import CONFIGS
    from transformers import AutoConfig, AutoModelForCausalLM
    dims = dict(CONFIGS["olmoe-1b-7b"], hidden_size=H, intermediate_size=96, num_hidden_layers=1,
                num_attention_heads=4, num_key_value_heads=4, vocab_size=512, num_experts=8, num_experts_per_tok=2)
    config = AutoConfig.for_model(dims.pop("model_type"), **dims)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa",
                                             experts_implementation=impl)
    x = torch.randn(B, S, H, dtype=torch.bfloat16, requires_grad=True)
    return (lambda: model.model.layers[0].mlp(x)), model.parameters()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("case", choices=("hf", "gpt", "moe"))
    parser.add_argument("mode", nargs="?", default="bf16", help="hf: bf16 | amp; moe: eager | grouped_mm")
    a = parser.parse_args()
    torch.manual_seed(0)
    if a.case == "hf":
        run, params = hf_layer(a.mode == "amp")
    elif a.case == "gpt":
        run, params = gpt_block()
    else:
        run, params = moe_block(a.mode)
    amp = a.case == "gpt" or a.mode == "amp"
    params = list(params)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        counts = saved_bytes(run, params, amp)
    for label, nbytes in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"{nbytes / (T * H):7.3f} T*h  {label}")
    print(f"total {sum(counts.values()) / (T * H):.3f} T*h bytes ({a.case} {'amp' if amp else a.mode}; T = {T}, h = {H})")


if __name__ == "__main__":
    main()
