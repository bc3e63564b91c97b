"""A communication op as data: which dimension issues it, on which rank groups, how many bytes, how often, and
what it may hide behind."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: docs/interface.md ``exposed_comm`` keys
DIMS = ("tp", "cp", "ulysses", "ep", "pp", "dp")
Scope = Literal["layer_fwd", "layer_bwd", "layer_recompute", "boundary", "microbatch", "step"]
Overlap = Literal["none", "gemm", "wgrad", "dgrad", "attention_fwd", "attention_bwd", "forward", "backward",
                  "experts"]


@dataclass(frozen=True, slots=True)
class CommOp:
    """One collective (or P2P) call pattern.

    Attributes:
        dim: docs/interface.md dimension it is charged to (tp, cp, ulysses, ep, pp, dp).
        group: rank-group kind it runs on: a ``ResolvedPlan.rank_groups`` name (tp, cp, ulysses, ep, pp, dp_cp,
            edp), ``pp_pair`` (a stage boundary: one rank of two adjacent stages), ``embedding`` (first and last
            stage) or ``pp_mirror`` (stage s and stage pp-1-s: DualPipe's two copies of a stage).
        op: collectives operation (all_reduce, all_gather, reduce_scatter, all_to_all, sendrecv).
        bytes: bytes per call in nccl-tests convention (all_reduce: buffer; all_gather: total output;
            reduce_scatter: total input; all_to_all: total each rank sends; sendrecv: each rank sends).
        count: calls per scope instance (per layer, per boundary, per micro-batch or per step).
        scope: ``layer_fwd``/``layer_bwd``/``layer_recompute`` per layer and micro-batch, ``boundary`` per
            micro-batch and pipeline boundary, ``microbatch`` per micro-batch per stage, ``step`` once per step.
        overlap: the compute it may run under (``none``: on the critical path; ``experts``: MoE dispatch/combine,
            hidden behind the expert FFN as the MoE backend streams it).
        name: what it moves.
        layer: ``dense``/``moe`` for per-layer ops of that kind only, ``any`` for all layers, ``""`` otherwise.
    """

    dim: str
    group: str
    op: str
    bytes: float
    count: int
    scope: Scope
    overlap: Overlap
    name: str
    layer: str = ""

    @property
    def total_bytes(self) -> float:
        """bytes x count per scope instance."""
        return self.bytes * self.count
