"""DistMM's modality-aware partitioner and data load balancer (Huang et al., NSDI'24, sections 4.1-4.3), and the
uniform Megatron-style baseline, as searches over a small space.

- :func:`best_submodule_plan`: for one submodule on given GPUs, every (tp, pp) with tp inside a node and dividing
  the heads, dp = GPUs / (tp pp) dividing the batch, the largest power-of-two micro-batch that fits in memory
  (recompute none, else full), and with ``distmm_pipe`` also half that micro-batch (DistMM-Pipe's 2K micro-batches
  of Mbs / 2); the fastest by the engine's step wins.
- :func:`distmm_plan`: the data load balancer: every split of the GPUs between the two submodules (1, 2, 4, then
  multiples of the node size) and every placement the section allows (:mod:`simulator.multimodal.placement`);
  the split and placement whose slowest submodule plus exchange and loss is fastest wins (the paper's dynamic
  program minimizes the same max; with two submodules the split is one number, so we enumerate it).
- :func:`uniform_plan`: one (tp, pp) and micro-batch for every submodule on all GPUs, the largest micro-batch
  whose summed memory fits, the fastest by the summed step.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from simulator.errors import UserError
from simulator.memory import estimate_memory
from simulator.memory.runtime import ALLOCATOR_CACHE_BYTES, RUNTIME_BYTES
from simulator.multimodal.compose import MultimodalStep, distmm_step, uniform_step
from simulator.multimodal.evaluate import (
    PlanChoice,
    SubmoduleRun,
    evaluate_submodule,
    extra_state_bytes,
    replica_batch,
    resolve_submodule,
)
from simulator.multimodal.placement import feasible_placements, place
from simulator.multimodal.spec import MultimodalSpec, SubmoduleSpec
from simulator.topology import Topology

_DEGREES = (1, 2, 4, 8)
_PP = (1, 2, 4, 8)
_RECOMPUTE = ("none", "selective", "full")
MAX_MICRO_BATCH = 256
#: the largest share of padding samples a micro-batch size may add to a replica's batch (dp not dividing B)
MAX_PADDING = 1 / 16
#: micro-batch sizes tried per layout, largest first
MICRO_BATCH_TRIES = 4


@dataclass(frozen=True)
class Settings:
    """What every evaluation of one search shares."""

    spec: MultimodalSpec
    topology: Topology
    batch: int
    precision: str = "bf16"
    optimizer: str = "adam"
    pipeline: str = "distmm_pipe"


def stage_peaks(s: Settings, sub: SubmoduleSpec, choice: PlanChoice) -> list[float] | None:
    """Per-stage tensor peaks of ``sub`` under ``choice`` (None when the plan is invalid)."""
    try:
        plan = resolve_submodule(s.spec, sub, choice, s.batch, s.precision, s.optimizer)
    except UserError:
        return None
    memory = estimate_memory(plan)
    extra = extra_state_bytes(plan, sub.extra_params)
    return [st.peak + (extra if st.stage == 0 else 0.0) for st in memory.stages]


def _capacity(s: Settings) -> float:
    return s.topology.cluster.node.gpu.memory.capacity - RUNTIME_BYTES - ALLOCATOR_CACHE_BYTES


def micro_batch_candidates(batch: int, dp: int) -> list[int]:
    """Power-of-two micro-batches for a replica of ceil(batch / dp) samples, largest first, at most
    MICRO_BATCH_TRIES of them, each adding at most MAX_PADDING of the replica in padding. Under batch-sync the whole
    replica batch is in flight whatever the micro-batch, so the peak barely depends on it: the largest that fits
    is found within a few halvings (and few micro-batches keep the pipeline's op orders short)."""
    replica = -(-batch // dp)
    out, mb = [], 1
    while mb * 2 <= min(replica, MAX_MICRO_BATCH):
        mb *= 2
    while mb >= 1 and len(out) < MICRO_BATCH_TRIES:
        if replica_batch(batch, dp, mb) - replica <= replica * MAX_PADDING:
            out.append(mb)
        mb //= 2
    return out


def largest_micro_batch(s: Settings, subs: list[SubmoduleSpec], tp: int, pp: int, dp: int, recompute: str
                        ) -> int | None:
    """The largest candidate micro-batch (:func:`micro_batch_candidates`) whose (summed) stage peaks fit."""
    for mb in micro_batch_candidates(s.batch, dp):
        choice = PlanChoice(tp, pp, dp, mb, recompute)
        peaks = [stage_peaks(s, sub, choice) for sub in subs]
        if any(p is None for p in peaks):
            continue
        if max(sum(col) for col in zip(*peaks, strict=True)) <= _capacity(s):
            return mb
    return None


def candidate_layouts(s: Settings, subs: list[SubmoduleSpec], gpus: int) -> Iterator[tuple[int, int, int]]:
    """(tp, pp, dp) with tp inside a node dividing every submodule's heads, pp <= layers, dp = gpus / (tp pp);
    ``gpus`` above a node must fill whole (tp pp) groups."""
    node = s.topology.cluster.node.gpus
    for tp in _DEGREES:
        if tp > node or any(sub.heads % tp for sub in subs):
            continue
        for pp in _PP:
            if gpus % (tp * pp) or any(pp > sub.layers for sub in subs):
                continue
            yield tp, pp, gpus // (tp * pp)


def _choices(s: Settings, subs: list[SubmoduleSpec], gpus: int, half: bool) -> Iterator[PlanChoice]:
    for tp, pp, dp in candidate_layouts(s, subs, gpus):
        for recompute in _RECOMPUTE:
            mb = largest_micro_batch(s, subs, tp, pp, dp, recompute)
            if mb is None:
                continue
            yield PlanChoice(tp, pp, dp, mb, recompute)
            if half and pp > 1 and mb > 1:
                yield PlanChoice(tp, pp, dp, mb // 2, recompute)
            break  # the first recompute setting that fits: recomputing more only adds work


def best_submodule_plan(s: Settings, sub: SubmoduleSpec, gpus: tuple[int, ...]) -> SubmoduleRun | None:
    """The fastest fitting plan of ``sub`` on ``gpus`` (module docstring); None when nothing fits."""
    best = None
    for choice in _choices(s, [sub], len(gpus), s.pipeline == "distmm_pipe"):
        try:
            run = evaluate_submodule(s.spec, sub, choice, gpus, s.topology, s.batch, s.precision, s.optimizer)
        except UserError:  # a group spread unevenly over nodes: the collectives model cannot price it
            continue
        if best is None or run.step_s < best.step_s:
            best = run
    return best


#: the finest split the balancer tries is total / SPLIT_STEPS GPUs (every count on up to this many GPUs)
SPLIT_STEPS = 32


def split_candidates(total: int, nodes: int) -> list[int]:
    """GPU counts for the first submodule: multiples of the node count (every node can hold the same share, so
    both submodules' groups are even over nodes), at most SPLIT_STEPS of them, evenly spaced."""
    unit = nodes * max(1, total // (nodes * SPLIT_STEPS))
    return list(range(unit, total, unit))


def distmm_plan(s: Settings) -> MultimodalStep:
    """DistMM's partition, balance and placement (module docstring) for a two-submodule model."""
    subs = list(s.spec.submodules)
    if len(subs) != 2:
        raise UserError("the DistMM search handles two submodules (give explicit plans for more)",
                        key_path="multimodal.strategy")
    cluster = s.topology.cluster
    total, node = cluster.gpus, cluster.node.gpus
    cache: dict[tuple, SubmoduleRun | None] = {}
    best = None
    for n0 in split_candidates(total, cluster.nodes):
        counts = {subs[0].name: n0, subs[1].name: total - n0}
        for how in feasible_placements(counts, cluster.nodes, "auto"):
            ranks = place(counts, node, cluster.nodes, how)
            runs = {}
            for sub in subs:
                key = (sub.name, ranks[sub.name])
                if key not in cache:
                    cache[key] = best_submodule_plan(s, sub, ranks[sub.name])
                runs[sub.name] = cache[key]
            if any(r is None for r in runs.values()):
                continue
            step = distmm_step(s.spec, s.topology, runs, s.batch, how)
            if best is None or step.step_s < best.step_s:
                best = step
    if best is None:
        raise UserError("no DistMM plan fits in memory on this system", key_path="multimodal")
    return best


def uniform_plan(s: Settings) -> MultimodalStep:
    """The fastest uniform colocated plan whose summed memory fits (module docstring)."""
    subs = list(s.spec.submodules)
    gpus = tuple(range(s.topology.cluster.gpus))
    best = None
    for choice in _choices(s, subs, len(gpus), False):
        runs = {sub.name: evaluate_submodule(s.spec, sub, choice, gpus, s.topology, s.batch, s.precision,
                                             s.optimizer) for sub in subs}
        step = uniform_step(s.spec, s.topology, runs, s.batch)
        if best is None or step.step_s < best.step_s:
            best = step
    if best is None:
        raise UserError("no uniform plan fits in memory on this system", key_path="multimodal")
    return best
