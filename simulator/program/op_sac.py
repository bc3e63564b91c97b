"""What torchtitan's op-level selective activation checkpointing (``parallel.selective_ac_option: op``) re-runs in
a dense layer's backward: the forward ops its policy does not save, taken from the layer's own program.

The policy (pytorch/torchtitan torchtitan/distributed/activation_checkpoint.py at b5bcd76c; the saved-op list
recorded in simulator/validation/data/h200_hf/sac.jsonl ``sac_policy``) keeps the outputs of matmuls (``mm``,
``addmm``, ``bmm``, ``linear``), the SDPA variants, ``max`` and ``topk``, except every second ``aten.mm`` of a
block's forward, which it recomputes; a biased projection runs as ``addmm`` and is saved without being counted
(simulator/memory/activations.py ``op_sac_items`` keeps the same tensors). In backward,
``torch.utils.checkpoint`` (non-reentrant) re-runs the block's forward: saved ops return their cached output,
every other op runs again (norms, RoPE, the activation, the products, the first residual add, casts and layout
copies, an unfused attention's softmax). Its early stop (``torch.utils.checkpoint`` ``_checkpoint_early_stop``,
default on) ends the re-run at the last tensor the backward needs: the down projection's inputs are saved by its
autograd node before the GEMM runs, so neither the down projection nor the final residual add re-runs.

A gated FFN's gate and up projections are one fused program GEMM (``mlp.fc1``, n = 2 x ffn); the policy sees two
``mm`` and may recompute one of them: that half is priced as the same GEMM with half the columns.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.program.ops import Gemm, LayerProgram, MemOp

#: the block's last forward op (the second residual add): the early stop ends the re-run before it
LAST_OP = "bias_dropout_add.mlp"
#: the down projection: saved by the policy, or (an unsaved one) never re-run because of the early stop
DOWN_PROJ = "mlp.fc2"


def recomputed_ops(program: LayerProgram, qkv_bias: bool, linear_bias: bool, glu: bool
                   ) -> tuple[tuple[Gemm, ...], tuple[MemOp, ...]]:
    """(GEMMs, memory-bound ops) of ``program``'s forward that op-level SAC re-runs in backward (module
    docstring); ``qkv_bias``/``linear_bias``: which projections run as ``addmm``; ``glu``: ``mlp.fc1`` is the
    gate and up projections fused."""
    fwd = {g.name: g for g in program.gemms if g.phase == "fwd"}
    # the block's matmuls in forward order: (program GEMM, columns share, biased)
    order = [("q_proj", 1.0, qkv_bias), ("k_proj", 1.0, qkv_bias), ("v_proj", 1.0, qkv_bias),
             ("o_proj", 1.0, linear_bias)]
    order += ([("mlp.fc1", 0.5, linear_bias)] * 2 if glu else [("mlp.fc1", 1.0, linear_bias)])
    order += [(DOWN_PROJ, 1.0, linear_bias)]
    gemms, count = [], 0
    for name, share, biased in order:
        if biased or name not in fwd:
            continue
        count += 1
        if count % 2 == 0 and name != DOWN_PROJ:
            g = fwd[name]
            gemms.append(g if share == 1.0 else replace(g, n=g.n * share, name=f"{g.name}.half{count}"))
    mems = tuple(o for o in program.memops if o.phase == "fwd" and o.name != LAST_OP)
    return tuple(gemms), mems
