"""LLM-based multimodal models (LLaVA): the vision encoder on the LLM's first pipeline stage (Megatron-LM's way)
against a separate encoder pool (DistMM's disaggregation, as DistTrain, SIGCOMM'25, also does).

First stage: the encoder runs, per micro-batch, on the GPUs of the LLM's first stage with the LLM's tp and dp, so
stage 0's forward and backward of every micro-batch grow by the encoder's (and the projector's); the pipeline's
timeline (:func:`simulator.schedule.timeline.run_timeline` over :func:`simulator.plan.pipeline.stage_orders`) is
re-run with those stage costs, and the step grows by the difference. The imbalance is stage 0's busy time over the
mean of the others'.
Pool: the encoder on its own GPUs with its own plan, the LLM on the rest, composed as DistMM's plan
(:func:`simulator.multimodal.compose.distmm_step`: the slowest side, the image-token exchange and one encoder
micro-batch of fill).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.compute.layer import LayerTime
from simulator.multimodal.evaluate import PlanChoice, SubmoduleRun, evaluate_submodule, priced
from simulator.multimodal.spec import MultimodalSpec
from simulator.program.multimodal import projector_program
from simulator.schedule.timeline import run_timeline
from simulator.topology import Topology


@dataclass(frozen=True)
class FirstStage:
    """The LLM with the encoder folded into its first stage."""

    llm: SubmoduleRun
    encoder: SubmoduleRun
    """The encoder timed alone on stage 0's GPUs (one replica per LLM replica, the LLM's tp)."""
    projector_s: float
    step_s: float
    stage_busy_s: tuple[float, ...]

    @property
    def imbalance(self) -> float:
        """Stage 0's busy time over the mean of the other stages' (1 = balanced)."""
        rest = self.stage_busy_s[1:]
        return self.stage_busy_s[0] / (sum(rest) / len(rest)) if rest else 1.0

    def to_dict(self) -> dict:
        return {"step_s": self.step_s, "llm_alone_s": self.llm.step_s, "encoder_per_step_s": self.encoder.step_s,
                "projector_s": self.projector_s, "stage_busy_s": list(self.stage_busy_s),
                "first_stage_imbalance": self.imbalance}


def _per_microbatch(run: SubmoduleRun) -> tuple[list[float], list[float]]:
    """Forward and backward seconds of micro-batch 0 on each stage (vpp = 1)."""
    fwd, bwd = [], []
    for tl in run.step.op_timelines():
        ops = {(k, j): end - begin for k, j, _, begin, end in tl.ops}
        fwd.append(ops[("F", 0)])
        bwd.append(ops[("B", 0)])
    return fwd, bwd


def projector_time(spec: MultimodalSpec, tokens: float, tp: int, gpu, dtype: str) -> LayerTime | None:
    """The projector over ``tokens`` image tokens on one TP rank, forward and backward: its program
    (:func:`simulator.program.multimodal.projector_program`) priced (None without a projector)."""
    pr = spec.projector
    if pr is None:
        return None
    return priced(projector_program(tokens, pr.input, pr.hidden, pr.output, tp, dtype), gpu)


def encoder_on_first_stage(spec: MultimodalSpec, llm_choice: PlanChoice, topology: Topology, batch: int,
                           precision: str = "bf16", optimizer: str = "adam") -> FirstStage:
    """Megatron's layout: the encoder inside the LLM's first pipeline stage (module docstring)."""
    llm_sub = next(s for s in spec.submodules if s.role == "llm")
    vision = spec.vision
    gpus = tuple(range(llm_choice.gpus))
    llm = evaluate_submodule(spec, llm_sub, llm_choice, gpus, topology, batch, precision, optimizer)
    c = llm_choice
    enc_choice = PlanChoice(c.tp, 1, c.dp, c.micro_batch, c.recompute)
    stage0 = tuple(r for d in range(c.dp) for r in range(c.tp * d, c.tp * (d + 1)))
    encoder = evaluate_submodule(spec, vision, enc_choice, stage0, topology, batch, precision, optimizer)
    m = llm.plan.num_microbatches
    gpu = topology.cluster.node.gpu
    proj = projector_time(spec, c.micro_batch * vision.patches, c.tp, gpu, llm.plan.gemm_dtype(gpu))
    proj_fwd, proj_bwd = (proj.fwd_s, proj.bwd_s) if proj is not None else (0.0, 0.0)
    enc_f, enc_b = _per_microbatch(encoder)
    fwd, bwd = _per_microbatch(llm)
    fwd[0] += enc_f[0] + proj_fwd
    bwd[0] += enc_b[0] + proj_bwd
    orders = llm.plan.schedule.orders(c.pp, 1, m)
    before = run_timeline(orders, [[f] for f in _per_microbatch(llm)[0]], [[b] for b in _per_microbatch(llm)[1]],
                          llm.step.p2p_s)
    after = run_timeline(orders, [[f] for f in fwd], [[b] for b in bwd], llm.step.p2p_s)
    grow = max(t.end_s for t in after) - max(t.end_s for t in before)
    return FirstStage(llm, encoder, (proj_fwd + proj_bwd) * m, llm.step_s + grow, tuple(t.busy_s for t in after))
