"""Communication of one serving step (a prefill chunk or a decode step, forward only) for a
:class:`~simulator.plan.Batch` on one replica: what the engines (vLLM, SGLang) issue per layer, per pipeline
boundary and once per step.

- TP: two all-reduces of ``tokens x h`` per layer (the attention output and the MLP or MoE output; vLLM's
  ``RowParallelLinear`` and ``FusedMoE`` reduce their outputs over TP), every layer kind. Whether the engine's
  custom all-reduce kernel or NCCL runs them is a pricing choice (:mod:`simulator.serving.backends`).
- EP: dispatch and combine of the router's tokens (``tokens x top_k x h`` each rank sends, uniform routing), priced
  by the phase's MoE backend on the EP group; a collective backend (vLLM's ``allgather_reducescatter``) all-gathers
  every rank's tokens (``tokens x ep x h``) and reduce-scatters the outputs instead.
- PP: the hand-off of the batch's activations (``tokens x h / tp``: each TP rank sends its shard) per stage
  boundary.
- The sampler's logits gather over TP once per step: ``sequences x vocabulary`` logits in 16 bits (vLLM's
  ``LogitsProcessor._gather_logits`` gathers the vocabulary-parallel LM head's output, padding included, before it
  slices the real vocabulary), the vocabulary the weights hold (``ResolvedPlan.vocab_held``).
"""

from __future__ import annotations

from simulator.plan import Batch, ResolvedPlan
from simulator.traffic.ops import CommOp

#: bytes per logit the sampler gathers (the LM head's 16-bit output)
LOGIT_BYTES = 2


def serving_layer_traffic(rp: ResolvedPlan, batch: Batch) -> tuple[CommOp, ...]:
    """Per-layer ops of a serving step (module docstring); ``layer`` says dense, MoE or any layers."""
    p, m, act = rp.parallel, rp.model, rp.recipe.activation
    ops = []
    if p.tp > 1:
        size = batch.tokens * m.hidden * act
        ops += [CommOp("tp", "tp", "all_reduce", size, 1, "layer_fwd", "none", name, "any")
                for name in ("attention output", "mlp output")]
    if p.ep > 1 and m.moe is not None:
        tokens = rp.shape_of(batch).norm_tokens
        if rp.moe_backend.collective:
            size = tokens * p.ep * m.hidden * act
            ops += [CommOp("ep", "ep", "all_gather", size, 1, "layer_fwd", "none", "tokens (all-gather)", "moe"),
                    CommOp("ep", "ep", "reduce_scatter", size, 1, "layer_fwd", "none", "outputs (reduce-scatter)",
                           "moe")]
        else:
            size = tokens * m.moe.top_k * m.hidden * act
            ops += [CommOp("ep", "ep", "all_to_all", size, 1, "layer_fwd", "experts", name, "moe")
                    for name in ("dispatch", "combine")]
    return tuple(ops)


def serving_boundary_traffic(rp: ResolvedPlan, batch: Batch) -> tuple[CommOp, ...]:
    """The PP hand-off of the batch's activations at one stage boundary (none without PP)."""
    p = rp.parallel
    if p.pp == 1:
        return ()
    size = batch.tokens * rp.model.hidden * rp.recipe.activation / p.tp
    return (CommOp("pp", "pp_pair", "sendrecv", size, 1, "boundary", "none", "activations"),)


def serving_step_traffic(rp: ResolvedPlan, batch: Batch) -> tuple[CommOp, ...]:
    """The last stage's once-per-step ops: the sampler's logits gather over TP (none without TP)."""
    p = rp.parallel
    if p.tp == 1:
        return ()
    size = batch.sequences * rp.vocab_held * LOGIT_BYTES
    return (CommOp("tp", "tp", "all_gather", size, 1, "step", "none", "logits"),)
