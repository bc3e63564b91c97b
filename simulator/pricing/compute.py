"""Seconds of a program's compute on one GPU: a :class:`~simulator.program.LayerProgram` priced on (GPU spec,
efficiency table) into a :class:`~simulator.compute.layer.LayerTime`.

- GEMMs by dtype (recorded on each op when the program was built) through
  :func:`simulator.compute.layer.gemm_seconds` (shape-dependent efficiency; grouped-expert slowdown);
- memory-bound ops at ``HBM bandwidth x memory_efficiency`` plus a launch each
  (:func:`simulator.compute.layer.memory_seconds`);
- the core attention: a fused kernel at its fitted fraction of the tensor peak
  (:func:`simulator.compute.layer.fused_attention_seconds`), or the unfused score GEMMs plus their softmax and
  dropout ops;
- the forward of each module selective recompute can re-run (``LayerTime.module_fwd``,
  :data:`simulator.program.ops.RECOMPUTE_MODULE_OPS`);
- what op-level selective checkpointing re-runs (module ``op_sac``, :mod:`simulator.program.op_sac`);
- the eager framework's host issue cost (:mod:`simulator.compute.host`).

:func:`layer_time`, :func:`head_time`, :func:`embedding_time` and :func:`expert_ffn_time` build the program
(:mod:`simulator.program.build`) and price it. The layer's communication (``LayerProgram.comm``) is priced on its
groups by the schedule (:class:`simulator.pricing.GroupTimer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from simulator.compute.efficiency import ComputeEfficiency
from simulator.compute.host import HostIssueCosts
from simulator.compute.layer import LayerTime, fused_attention_seconds, gemm_seconds, memory_seconds
from simulator.hardware import GpuSpec
from simulator.model import ModelSpec, RankShape
from simulator.program import (
    FUSED_CROSS_ENTROPY,
    FUSED_PERMUTE,
    RECOMPUTE_MODULE_OPS,
    Gemm,
    LayerProgram,
    MemOp,
    PermuteChain,
    embedding_program,
    expert_ffn_program,
    head_program,
    layer_program,
    op_sac_recomputed_ops,
)


def gemm_op_seconds(ops: Sequence[Gemm], gpu: GpuSpec, eff: ComputeEfficiency) -> np.ndarray:
    """Seconds of each GEMM in ``ops``, each in its own compute and weight dtype (one vectorized call per pair)."""
    out = np.zeros(len(ops))
    dtypes = [(o.dtype, o.weight_dtype) for o in ops]
    for d, w in set(dtypes):
        idx = [i for i, x in enumerate(dtypes) if x == (d, w)]
        shapes = np.array([[ops[i].m, ops[i].k, ops[i].n, ops[i].batch, ops[i].density] for i in idx], dtype=float)
        grouped = np.array([ops[i].kernel == "grouped_expert" for i in idx])
        slowdown = np.array([ops[i].slowdown for i in idx], dtype=float)
        out[idx] = gemm_seconds(shapes, grouped, gpu, eff, d, slowdown, w)
    return out


def mem_op_seconds(ops: Sequence[MemOp], gpu: GpuSpec, eff: ComputeEfficiency, phase: str,
                   attention: bool | None = None) -> float:
    """Seconds of the memory-bound ops of ``phase`` (only those with ``attention`` equal to it, unless None)."""
    sel = [o for o in ops if o.phase == phase and (attention is None or o.attention == attention)]
    own_launch = sum(o.kernel != "kernel_set" for o in sel)   # a kernel set's bytes launch with its kernels
    return memory_seconds(sum(o.bytes for o in sel), own_launch, gpu, eff)


def _attention_seconds(program: LayerProgram, gpu: GpuSpec, eff: ComputeEfficiency) -> tuple[float, float]:
    att = program.attention
    if att is None:
        return 0.0, 0.0
    if att.fused:
        return fused_attention_seconds(att.fwd_flops, att.bwd_flops, att.kernel, att.seq_len, att.dhead, gpu, eff,
                                       att.dtype)
    core_s = gemm_op_seconds(att.gemms, gpu, eff)
    fwd = float(sum(t for o, t in zip(att.gemms, core_s, strict=True) if o.phase == "fwd"))
    bwd = float(sum(t for o, t in zip(att.gemms, core_s, strict=True) if o.phase != "fwd"))
    fwd += mem_op_seconds(program.memops, gpu, eff, "fwd", attention=True)
    bwd += mem_op_seconds(program.memops, gpu, eff, "bwd", attention=True)
    return fwd, bwd


def _module_forwards(program: LayerProgram, gemm_s: np.ndarray, gpu: GpuSpec, eff: ComputeEfficiency
                     ) -> tuple[tuple[str, float, float], ...]:
    """(module, forward seconds, forward FLOPs) of each module selective recompute can re-run (the layer's own
    forward GEMMs and memory-bound kernels of that module)."""
    out = []
    for name, (gemms, memops) in RECOMPUTE_MODULE_OPS.items():
        picked = [(o, t) for o, t in zip(program.gemms, gemm_s, strict=True)
                  if o.phase == "fwd" and o.name.startswith(gemms)]
        mems = [o for o in program.memops if o.phase == "fwd" and o.name in memops]
        if not picked and not mems:
            continue
        sec = sum(t for _, t in picked) + mem_op_seconds(mems, gpu, eff, "fwd")
        out.append((name, float(sec), float(sum(o.flops for o, _ in picked))))
    return tuple(out)


def price(program: LayerProgram, gpu: GpuSpec, eff: ComputeEfficiency, host: HostIssueCosts | None = None
          ) -> LayerTime:
    """The :class:`LayerTime` of ``program`` on ``gpu`` with efficiency table ``eff``; ``host``: the eager
    framework's host issue costs (None with CUDA graphs; applies to transformer layers only)."""
    gemm_s = gemm_op_seconds(program.gemms, gpu, eff)
    pairs = list(zip(program.gemms, gemm_s, strict=True))
    by_phase = {p: float(sum(t for o, t in pairs if o.phase == p)) for p in ("fwd", "bwd_dgrad", "bwd_wgrad")}
    expert = {p: float(sum(t for o, t in pairs if o.phase in p and o.expert))
              for p in (("fwd",), ("bwd_dgrad", "bwd_wgrad"))}
    attn_fwd, attn_bwd = _attention_seconds(program, gpu, eff)
    other_fwd = mem_op_seconds(program.memops, gpu, eff, "fwd", attention=False)
    other_bwd = mem_op_seconds(program.memops, gpu, eff, "bwd", attention=False)
    issue = host is not None and program.host_issue
    moe = program.kind == "moe"
    host_fwd, host_bwd = host.layer(moe, program.local_experts) if issue else (0.0, 0.0)
    ckpt_fwd, ckpt_bwd = (host.checkpoint_fwd_s, host.checkpoint_bwd_s) if issue else (0.0, 0.0)
    sac_fwd, sac_bwd = (host.sac_fwd_s, host.sac_bwd_s) if issue and not moe else (0.0, 0.0)
    att = program.attention
    return LayerTime(
        fwd_s=by_phase["fwd"] + attn_fwd + other_fwd,
        bwd_s=by_phase["bwd_dgrad"] + by_phase["bwd_wgrad"] + attn_bwd + other_bwd,
        attn_fwd_s=attn_fwd, attn_bwd_s=attn_bwd, wgrad_s=by_phase["bwd_wgrad"], dgrad_s=by_phase["bwd_dgrad"],
        fwd_gemm_s=by_phase["fwd"], expert_fwd_s=expert[("fwd",)], expert_bwd_s=expert[("bwd_dgrad", "bwd_wgrad")],
        fwd_flops=program.fwd_flops, bwd_flops=program.bwd_flops,
        attn_fwd_flops=att.fwd_flops if att is not None else 0.0,
        module_fwd=_module_forwards(program, gemm_s, gpu, eff), host_fwd_s=host_fwd, host_bwd_s=host_bwd,
        host_ckpt_fwd_s=ckpt_fwd, host_ckpt_bwd_s=ckpt_bwd, host_sac_fwd_s=sac_fwd, host_sac_bwd_s=sac_bwd,
        host_runs_ahead=issue and host.runs_ahead(moe))


def layer_time(model: ModelSpec, sh: RankShape, gpu: GpuSpec, eff: ComputeEfficiency, dtype: str, *,
               layer_index: int, attention: str = "flash", eager: bool = False, amp: bool = False,
               fp8_cast_bytes: tuple[float, float] = (0.0, 0.0), grad_accum_bytes: float = 0.0,
               host: HostIssueCosts | None = None, permute: PermuteChain = FUSED_PERMUTE,
               sequential_experts: bool = False, sort_chunks: bool = False,
               fsdp_copy_bytes: tuple[float, float] = (0.0, 0.0)) -> LayerTime:
    """Time of layer ``layer_index`` for one micro-batch on one rank whose share of the layer is ``sh``: its
    program (:func:`simulator.program.layer_program`, whose docstring defines the arguments) priced by
    :func:`price` with the eager framework's ``host`` issue costs (None with CUDA graphs)."""
    program = layer_program(model, sh, dtype, layer_index=layer_index, attention=attention, eager=eager, amp=amp,
                            fp8_cast_bytes=fp8_cast_bytes, grad_accum_bytes=grad_accum_bytes, permute=permute,
                            sequential_experts=sequential_experts, sort_chunks=sort_chunks,
                            fsdp_copy_bytes=fsdp_copy_bytes)
    lt = price(program, gpu, eff, host)
    if program.kind != "dense" or program.attention is None:
        return lt
    gemms, mems = op_sac_recomputed_ops(program, model.has_qkv_bias, model.linear_bias, model.glu)
    sec = float(gemm_op_seconds(gemms, gpu, eff).sum()) + mem_op_seconds(mems, gpu, eff, "fwd")
    return replace(lt, module_fwd=lt.module_fwd + (("op_sac", sec, float(sum(g.flops for g in gemms))),))


def head_time(model: ModelSpec, sh: RankShape, gpu: GpuSpec, eff: ComputeEfficiency, dtype: str,
              grad_accum_bytes: float = 0.0, embedding_copy: bool = False,
              cross_entropy: tuple[float, float] = FUSED_CROSS_ENTROPY,
              fsdp_copy_bytes: tuple[float, float] = (0.0, 0.0)) -> LayerTime:
    """Final norm, output layer and cross entropy of the last stage, one micro-batch
    (:func:`simulator.program.head_program`, priced by :func:`price`)."""
    return price(head_program(model, sh, dtype, grad_accum_bytes, embedding_copy, cross_entropy, fsdp_copy_bytes),
                 gpu, eff)


def embedding_time(model: ModelSpec, sh: RankShape, gpu: GpuSpec, eff: ComputeEfficiency,
                   grad_accum_bytes: float = 0.0, fsdp_copy_bytes: tuple[float, float] = (0.0, 0.0)) -> LayerTime:
    """Embedding lookup and its gradient on the first stage, one micro-batch
    (:func:`simulator.program.embedding_program`, priced by :func:`price`)."""
    return price(embedding_program(model, sh, grad_accum_bytes, fsdp_copy_bytes), gpu, eff)


def expert_ffn_time(model: ModelSpec, gpu: GpuSpec, eff: ComputeEfficiency, dtype: str, rows_per_expert,
                    etp: int = 1) -> tuple[float, float, float]:
    """(forward, data-gradient, weight-gradient) seconds of one rank's routed-expert GEMMs when its local experts
    multiply ``rows_per_expert`` tokens each (:func:`simulator.program.expert_ffn_program`)."""
    program = expert_ffn_program(model, dtype, rows_per_expert, etp)
    secs = gemm_op_seconds(program.gemms, gpu, eff)
    return tuple(float(sum(t for o, t in zip(program.gemms, secs, strict=True) if o.phase == phase))
                 for phase in ("fwd", "bwd_dgrad", "bwd_wgrad"))
