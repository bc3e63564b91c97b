"""The program: the per-layer op list one rank runs for one micro-batch of a phase (GEMMs, memory-bound ops, the
core attention, the collectives the plan implies), built by pure functions from the model, the rank shape and the
recipe's implementation choices, and priced by :mod:`simulator.pricing.compute`. docs/program.md.

Imports ``simulator.plan``, ``simulator.model`` and ``simulator.traffic`` (the communication ops it references)
only.
"""

from simulator.program.build import (
    TRAINING,
    attention_dtype,
    embedding_program,
    expert_ffn_program,
    fp8_cast_memops,
    head_program,
    layer_comm,
    layer_program,
    linear_dtype,
    linear_gemms,
    parameter_pass_memops,
    plan_layer_program,
    quantized,
    rank_numel,
)
from simulator.program.memops import LayerShape, eager_memops, embedding_memops, head_memops, layer_memops
from simulator.program.multimodal import (
    attention_gemms,
    contrastive_logits_program,
    cross_attention_program,
    pooler_program,
    projector_program,
)
from simulator.program.op_chains import (
    CROSS_ENTROPY_BYTES,
    FUSED_CROSS_ENTROPY,
    FUSED_PERMUTE,
    PERMUTE_CHAINS,
    SEQUENTIAL_ASSEMBLY,
    PermuteChain,
)
from simulator.program.op_sac import recomputed_ops as op_sac_recomputed_ops
from simulator.program.ops import (
    RECOMPUTE_MODULE_OPS,
    AttentionOp,
    CacheAttentionOp,
    Gemm,
    LayerProgram,
    MemOp,
)
from simulator.program.serving import (
    cache_attention,
    serving_embedding_program,
    serving_head_program,
    serving_layer_program,
    touched_experts,
)

__all__ = [
    "CROSS_ENTROPY_BYTES", "FUSED_CROSS_ENTROPY", "FUSED_PERMUTE", "PERMUTE_CHAINS", "RECOMPUTE_MODULE_OPS",
    "SEQUENTIAL_ASSEMBLY", "TRAINING", "AttentionOp", "CacheAttentionOp", "Gemm", "LayerProgram", "LayerShape", "MemOp",
    "PermuteChain", "attention_dtype", "attention_gemms", "op_sac_recomputed_ops", "cache_attention", "contrastive_logits_program",
    "cross_attention_program", "eager_memops", "embedding_memops", "embedding_program", "expert_ffn_program",
    "fp8_cast_memops", "head_memops", "head_program", "layer_comm", "layer_memops", "layer_program",
    "linear_dtype", "linear_gemms", "parameter_pass_memops", "plan_layer_program", "pooler_program", "projector_program",
    "quantized", "rank_numel", "serving_embedding_program", "serving_head_program", "serving_layer_program",
    "touched_experts",
]
