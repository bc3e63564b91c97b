"""DistMM's modality-aware partitioner and data load balancer (Huang et al., NSDI'24, sections 4.1-4.3), and the
uniform Megatron-style baseline, as searches over a small space.

- :func:`best_submodule_plan`: for one submodule on given GPUs, every (tp, pp) with tp inside a node and dividing
  the heads, dp = GPUs / (tp pp), the largest micro-batch (below) that fits in memory (recompute none, then
  selective, then full), and with ``distmm_pipe`` (pp > 1, or a submodule whose tokens feed another's layers) the
  smaller candidates too until one is slower; the fastest by the engine's step (plus, for a producer, the fill it
  causes) wins.
- :func:`distmm_plan`: the partitioner and data load balancer: every split of the GPUs over the submodules (two,
  or CoCa's three) in multiples of the node count and every placement the section allows
  (:mod:`simulator.multimodal.placement`); then the uneven splits around the best one's work shares
  (:func:`balanced_splits`), packed or spread; the split and placement whose slowest submodule plus exchange,
  fill and loss is fastest wins (the paper's dynamic program minimizes the same max; the space is small enough to
  enumerate).
- :func:`uniform_plan`: one (tp, pp) and micro-batch for every submodule on all GPUs, the largest micro-batch
  whose summed memory fits, the fastest by the summed step.

Micro-batches. DistMM's data load balancer sets each replica's batch and micro-batch freely (its overview figure:
replica batches of 18 and 24 samples in micro-batches of 3 and 2), so a replica of R samples runs m micro-batches
of ceil(R / m) (:func:`micro_batch_candidates`). Megatron-LM has no batch-sync instruction: its schedules compute
the loss micro-batch by micro-batch, so a contrastive loss over the whole batch needs the whole replica batch in one
micro-batch (DistMM section 2.2: the micro-batch, not the batch, is what (M - Ms/P) / Ma bounds). The Megatron-style
baselines (uniform, monolithic) therefore run one micro-batch of ceil(B / dp) per replica when the loss is
contrastive (:func:`baseline_micro_batches`), and a pipeline of p stages then idles (p - 1) / p of the step.

Cost (docs/multimodal.md, "Cost of the search"): one StepCache per submodule and GPU set, memory checks of a
layout's later micro-batches by the first one's peak coefficients, and splits cut once one submodule cannot beat
the best step; every number is the one a plan priced alone gets.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, replace

from simulator.caching import memo
from simulator.errors import UserError
from simulator.memory.runtime import ALLOCATOR_CACHE_BYTES, RUNTIME_BYTES
from simulator.memory.scaling import PeakByMicroBatch, peak_by_micro_batch
from simulator.multimodal.activations import submodule_activation_items
from simulator.multimodal.compose import MultimodalStep, distmm_step, uniform_step
from simulator.multimodal.evaluate import (
    PlanChoice,
    SubmoduleRun,
    evaluate_submodule,
    extra_state_bytes,
    resolve_submodule,
    stage_peaks_with_extras,
    submodule_memory,
)
from simulator.multimodal.placement import feasible_placements, place
from simulator.multimodal.spec import MultimodalSpec, SubmoduleSpec
from simulator.plan.rules import data_parallel
from simulator.schedule.cache import StepCache
from simulator.topology import Topology

_DEGREES = (1, 2, 4, 8)
_PP = (1, 2, 4, 8)
_RECOMPUTE = ("none", "selective", "full")
MAX_MICRO_BATCH = 256
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
    uneven: bool = True
    """The data load balancer may split GPUs unevenly over nodes (:func:`balanced_splits`, placement packed)."""


def stage_peaks(s: Settings, sub: SubmoduleSpec, choice: PlanChoice) -> list[float] | None:
    """Per-stage tensor peaks of ``sub`` under ``choice`` (None when the plan is invalid)."""
    peaks = _stage_peaks(s.spec, sub, choice, s.batch, s.precision, s.optimizer)
    return None if peaks is None else list(peaks)


@memo(maxsize=8192)
def _stage_peaks(spec: MultimodalSpec, sub: SubmoduleSpec, choice: PlanChoice, batch: int, precision: str,
                 optimizer: str) -> tuple[float, ...] | None:
    """:func:`stage_peaks` by what it reads (a search asks again for the same plan once per layout it weighs;
    the topology plays no part)."""
    try:
        plan, memory, items = submodule_memory(spec, sub, choice, batch, precision, optimizer)
    except UserError:
        return None
    return _with_extras(spec, sub, plan, [st.peak for st in memory.stages], items)


def _with_extras(spec: MultimodalSpec, sub: SubmoduleSpec, plan, engine: list[float], items) -> tuple[float, ...]:
    """The engine's stage peaks plus what it lacks (:func:`stage_peaks_with_extras`)."""
    pooler = spec.pooler_params(sub)
    extra, tail = extra_state_bytes(plan, spec.extra_params(sub) - pooler), extra_state_bytes(plan, pooler)
    activations = tuple(sum(i.bytes for i in stage) for stage in items)
    return tuple(stage_peaks_with_extras(engine, extra, tail, activations))


def _capacity(s: Settings) -> float:
    return s.topology.cluster.node.gpu.memory.capacity - RUNTIME_BYTES - ALLOCATOR_CACHE_BYTES


#: a peak from a layout's coefficients this close to the capacity (relative) is decided by the plan's own report
FIT_MARGIN = 1e-9


def _line(spec: MultimodalSpec, sub: SubmoduleSpec, choice: PlanChoice, batch: int, precision: str, optimizer: str
          ) -> PeakByMicroBatch | None:
    """The coefficients of ``sub``'s engine peaks in the micro-batch (:func:`simulator.memory.scaling.
    peak_by_micro_batch`) from the report of ``choice``; None where the peak is not such a sum (gradients freed
    between steps: their peak changes at one micro-batch)."""
    plan, memory, _ = submodule_memory(spec, sub, choice, batch, precision, optimizer)
    if plan.recipe.grads_freed_between_steps:
        return None
    p = plan.parallel
    return peak_by_micro_batch(memory, choice.micro_batch, plan.num_microbatches, p.schedule, p.pp, p.vpp)


def _line_peaks(spec: MultimodalSpec, sub: SubmoduleSpec, choice: PlanChoice, batch: int, precision: str,
                optimizer: str, line: PeakByMicroBatch) -> tuple[float, ...] | None:
    """The stage peaks of ``choice`` with the engine's part from ``line`` (a plan of the same layout and recompute
    at another micro-batch: its items sum to F + (b / b0)(P + Q in_flight(m) / f0), docs/search.md) and the extras
    from the plan itself; no memory report is built."""
    try:
        plan = resolve_submodule(spec, sub, choice, batch, precision, optimizer)
    except UserError:
        return None
    engine = line.stage_peaks(choice.micro_batch, plan.num_microbatches)
    return _with_extras(spec, sub, plan, engine, submodule_activation_items(spec, sub, plan))


def micro_batch_candidates(batch: int, dp: int, pp: int = 1) -> list[int]:
    """Micro-batches for a replica of R = ceil(batch / dp) samples, largest first: ceil(R / m) for m = the fewest
    micro-batches of at most MAX_MICRO_BATCH, then doubling, at least MICRO_BATCH_TRIES of them and on until
    m >= 4 pp (a pipeline's bubble, (pp - 1) / (m + pp - 1) of a batch-sync step, wants many micro-batches); the
    padding is under m samples. Under batch-sync the whole replica batch is in flight whatever the micro-batch, so
    the peak barely depends on it."""
    replica = -(-batch // dp)
    out, m = [], -(-replica // MAX_MICRO_BATCH)
    while (len(out) < MICRO_BATCH_TRIES or m <= 4 * pp) and m <= replica:
        mb = -(-replica // m)
        if not out or mb < out[-1]:
            out.append(mb)
        m *= 2
    return out


def baseline_micro_batches(spec: MultimodalSpec, batch: int, dp: int) -> list[int]:
    """Micro-batches a Megatron-style baseline may use (module docstring): the whole replica batch when the loss is
    contrastive (Megatron-LM computes the loss per micro-batch), else :func:`micro_batch_candidates`."""
    if "contrastive" in spec.loss:
        return [-(-batch // dp)]
    return micro_batch_candidates(batch, dp)


def searched_choice(tp: int, pp: int, dp: int, micro_batch: int, recompute: str) -> PlanChoice:
    """A plan the searches build, for DistMM and the baselines alike: Megatron-LM's distributed optimizer with DP
    (optimizer states sharded over the replicas). No sequence parallelism: it needs the tokens divisible by tp, and
    a ViT's 257 or a CLIP text tower's 77 are odd."""
    return PlanChoice(tp, pp, dp, micro_batch, recompute, distributed_optimizer=dp > 1)


def fitting_micro_batches(s: Settings, subs: list[SubmoduleSpec], tp: int, pp: int, dp: int, recompute: str,
                          baseline: bool = False) -> list[int]:
    """The candidate micro-batches (:func:`micro_batch_candidates`, or :func:`baseline_micro_batches` for a
    Megatron-style baseline) whose (summed) stage peaks fit, largest first (once the largest fits, the smaller ones
    do: the in-flight batch is the same and the transient buffers shrink). The first try that resolves builds its
    memory reports; the later ones take the engine's peaks from its coefficients (:func:`_line_peaks`), unless
    they land within FIT_MARGIN of the capacity, where their own reports decide: the verdicts are the reports'."""
    return list(_fitting(s.spec, tuple(subs), tp, pp, dp, recompute, baseline, s.batch, s.precision, s.optimizer,
                         _capacity(s)))


@memo(maxsize=4096)
def _fitting(spec: MultimodalSpec, subs: tuple[SubmoduleSpec, ...], tp: int, pp: int, dp: int, recompute: str,
             baseline: bool, batch: int, precision: str, optimizer: str, cap: float) -> tuple[int, ...]:
    """:func:`fitting_micro_batches` by what it reads (a search asks again for each GPU set of one size)."""
    tries = baseline_micro_batches(spec, batch, dp) if baseline else micro_batch_candidates(batch, dp, pp)
    lines: dict[str, PeakByMicroBatch | None] = {}
    for i, mb in enumerate(tries):
        choice = searched_choice(tp, pp, dp, mb, recompute)
        if lines and all(lines[sub.name] is not None for sub in subs):
            peaks = [_line_peaks(spec, sub, choice, batch, precision, optimizer, lines[sub.name]) for sub in subs]
            if any(p is None for p in peaks):
                continue
            total = max(sum(col) for col in zip(*peaks, strict=True))
            if abs(total - cap) > FIT_MARGIN * cap:
                if total <= cap:
                    return tuple(tries[i:])
                continue
        peaks = [_stage_peaks(spec, sub, choice, batch, precision, optimizer) for sub in subs]
        if any(p is None for p in peaks):
            continue
        if not lines:
            lines = {sub.name: _line(spec, sub, choice, batch, precision, optimizer) for sub in subs}
        if max(sum(col) for col in zip(*peaks, strict=True)) <= cap:
            return tuple(tries[i:])
    return ()


def candidate_layouts(s: Settings, subs: list[SubmoduleSpec], gpus: int) -> Iterator[tuple[int, int, int]]:
    """(tp, pp, dp) with tp inside a node dividing every submodule's heads, pp <= layers, dp = gpus / (tp pp);
    ``gpus`` above a node must fill whole (tp pp) groups."""
    node = s.topology.cluster.node.gpus
    for tp in _DEGREES:
        if tp > node or any(sub.heads % tp for sub in subs):
            continue
        for pp in _PP:
            dp = data_parallel(gpus, tp=tp, pp=pp)
            if dp is None or any(pp > sub.layers for sub in subs):
                continue
            yield tp, pp, dp


def _layout_choices(s: Settings, subs: list[SubmoduleSpec], tp: int, pp: int, dp: int, every: bool
                    ) -> Iterator[PlanChoice]:
    """For one layout, the first recompute setting with a fitting micro-batch (recomputing more only adds work):
    its largest fitting micro-batch, and with ``every`` (DistMM-Pipe, with pp > 1 or a submodule whose tokens feed
    another's layers) the smaller candidates after it (more, smaller micro-batches shrink the bubble and the
    consumer's wait for the first one, and cost GEMM efficiency; the engine weighs the two)."""
    for recompute in _RECOMPUTE:
        fits = fitting_micro_batches(s, subs, tp, pp, dp, recompute, baseline=False)
        if fits:
            for mb in fits if every else fits[:1]:
                yield searched_choice(tp, pp, dp, mb, recompute)
            return


def _baseline_choices(s: Settings, subs: list[SubmoduleSpec], gpus: int) -> Iterator[PlanChoice]:
    """Per layout, the first recompute setting whose baseline micro-batch fits."""
    for tp, pp, dp in candidate_layouts(s, subs, gpus):
        for recompute in _RECOMPUTE:
            fits = fitting_micro_batches(s, subs, tp, pp, dp, recompute, baseline=True)
            if fits:
                yield searched_choice(tp, pp, dp, fits[0], recompute)
                break


def best_submodule_plan(s: Settings, sub: SubmoduleSpec, gpus: tuple[int, ...]) -> SubmoduleRun | None:
    """The fastest fitting plan of ``sub`` on ``gpus`` (module docstring); None when nothing fits. A submodule
    whose tokens feed another's layers is judged by its step plus the fill it causes (one forward micro-batch).
    Within a layout the micro-batches are tried largest first and the walk stops at the first that is slower than
    the one before (the bubble and the fill shrink and the GEMMs slow down as micro-batches shrink: one minimum)."""
    feeds = s.spec.feeds(sub)
    best, best_cost = None, float("inf")
    cache = StepCache()   # every plan of ``sub`` on these GPUs: one model, one topology view
    for tp, pp, dp in candidate_layouts(s, [sub], len(gpus)):
        previous = None
        for choice in _layout_choices(s, [sub], tp, pp, dp, s.pipeline == "distmm_pipe" and (pp > 1 or feeds)):
            try:
                run = evaluate_submodule(s.spec, sub, choice, gpus, s.topology, s.batch, s.precision, s.optimizer,
                                         cache=cache)
            except UserError:  # a layout the engine refuses
                break
            cost = run.step_s + (run.forward_microbatch_s if feeds else 0.0)
            if previous is not None and cost >= previous:
                break
            previous = cost
            if cost < best_cost:
                best, best_cost = run, cost
    return best


#: GPUs either side of a submodule's work share that the data load balancer tries
BALANCE_REACH = 2
#: placements of the uneven splits (simulator/multimodal/placement.py)
UNEVEN_PLACEMENTS = ("packed", "spread")
#: the finest split the balancer tries is total / SPLIT_STEPS GPUs (every count on up to this many GPUs)
SPLIT_STEPS = 32


def split_candidates(total: int, nodes: int) -> list[int]:
    """GPU counts for the first submodule: multiples of the node count (every node can hold the same share, so
    both submodules' groups are even over nodes), at most SPLIT_STEPS of them, evenly spaced."""
    unit = nodes * max(1, total // (nodes * SPLIT_STEPS))
    return list(range(unit, total, unit))


def splits(total: int, nodes: int, parts: int) -> list[tuple[int, ...]]:
    """Every way to give ``parts`` submodules GPU counts from :func:`split_candidates`' unit that add up to
    ``total`` (two submodules: exactly ``split_candidates``; CoCa's three over 64 GPUs in eighths: 21 splits)."""
    unit = nodes * max(1, total // (nodes * SPLIT_STEPS))
    if parts == 1:
        return [(total,)] if total > 0 else []
    return [(n, *rest) for n in range(unit, total - unit * (parts - 2), unit)
            for rest in splits(total - n, nodes, parts - 1)]


def _shape_key(s: Settings, sub: SubmoduleSpec, gpus: tuple[int, ...]) -> tuple:
    """:func:`_cached_run`'s key: the submodule and its GPUs shifted by whole nodes to start on the first node."""
    node = s.topology.cluster.node.gpus
    shift = min(gpus) // node * node
    return sub.name, tuple(g - shift for g in gpus)


def _cached_run(s: Settings, sub: SubmoduleSpec, gpus: tuple[int, ...], cache: dict) -> SubmoduleRun | None:
    """:func:`best_submodule_plan`, evaluated once per shape: GPUs shifted by whole nodes give the same step (nodes
    are alike); the run is returned on the real GPUs."""
    key = _shape_key(s, sub, gpus)
    if key not in cache:
        cache[key] = best_submodule_plan(s, sub, tuple(gpus))
    run = cache[key]
    return None if run is None else replace(run, gpus=tuple(gpus))


def balanced_splits(total: int, runs: dict[str, SubmoduleRun], reach: int = BALANCE_REACH) -> list[tuple[int, ...]]:
    """The data load balancer's uneven splits: each submodule's share of ``total`` GPUs in proportion to its work
    in ``runs`` (GPU-seconds: step x GPUs), rounded, and every split within ``reach`` GPUs of it per submodule that
    adds up to ``total`` (each submodule at least one GPU)."""
    work = [r.step_s * r.choice.gpus for r in runs.values()]
    ideal = [total * w / sum(work) for w in work]
    ranges = [range(max(1, round(x) - reach), round(x) + reach + 1) for x in ideal[:-1]]
    out = []
    for head in itertools.product(*ranges):
        last = total - sum(head)
        if last >= 1:
            out.append((*head, last))
    return out


def _evaluate_split(s: Settings, subs: list[SubmoduleSpec], split: tuple[int, ...], how: str, cache: dict,
                    beat: float = float("inf"), work: dict[str, float] | None = None) -> MultimodalStep | None:
    """The DistMM step of one split and placement; None when a submodule fits nowhere on its GPUs, or when the
    step cannot be faster than ``beat``: a DistMM step is its slowest submodule's step plus exchange, fill and loss
    (each >= 0), so once one submodule's best step is >= ``beat`` the others are not searched. The submodules
    already searched on their shape come first (free), then the others, the likely slowest first: the most
    GPU-seconds of ``work`` (the best split's, by submodule) per GPU here. The order saves searches only; the
    result is the same in any order."""
    cluster = s.topology.cluster
    counts = {sub.name: n for sub, n in zip(subs, split, strict=True)}
    ranks = place(counts, cluster.node.gpus, cluster.nodes, how)
    runs: dict[str, SubmoduleRun] = {}
    def order(x: SubmoduleSpec) -> tuple[bool, float]:
        return _shape_key(s, x, ranks[x.name]) not in cache, -(work or {}).get(x.name, 0.0) / counts[x.name]

    for sub in sorted(subs, key=order):
        run = _cached_run(s, sub, ranks[sub.name], cache)
        if run is None or run.step_s >= beat:
            return None
        runs[sub.name] = run
    return distmm_step(s.spec, s.topology, {sub.name: runs[sub.name] for sub in subs}, s.batch, how)


def _work(step: MultimodalStep) -> dict[str, float]:
    """GPU-seconds per submodule of a DistMM step (step x GPUs; :func:`balanced_splits` splits by them)."""
    return {name: r.step_s * r.choice.gpus for name, r in step.runs.items()}


def distmm_plan(s: Settings) -> MultimodalStep:
    """DistMM's partition, balance and placement (module docstring): every split of the GPUs over the submodules
    in multiples of the node count (:func:`splits`) and every placement; then the data load balancer's uneven
    splits around the best one's work shares (:func:`balanced_splits`), packed on consecutive GPUs (a submodule
    may take part of a node and share it with the next) or spread over every node as evenly as they go; the
    fastest step wins."""
    subs = list(s.spec.submodules)
    cluster = s.topology.cluster
    cache: dict[tuple, SubmoduleRun | None] = {}
    best = None
    for split in splits(cluster.gpus, cluster.nodes, len(subs)):
        counts = {sub.name: n for sub, n in zip(subs, split, strict=True)}
        for how in feasible_placements(counts, cluster.nodes, "auto"):
            step = _evaluate_split(s, subs, split, how, cache, float("inf") if best is None else best.step_s,
                                   None if best is None else _work(best))
            if step is not None and (best is None or step.step_s < best.step_s):
                best = step
    if best is None:
        raise UserError("no DistMM plan fits in memory on this system", key_path="multimodal")
    if s.uneven and cluster.nodes > 1:
        for split in balanced_splits(cluster.gpus, best.runs):
            for how in UNEVEN_PLACEMENTS:
                step = _evaluate_split(s, subs, split, how, cache, best.step_s, _work(best))
                if step is not None and step.step_s < best.step_s:
                    best = step
    return best


def uniform_plan(s: Settings) -> MultimodalStep:
    """The fastest uniform colocated plan whose summed memory fits (module docstring)."""
    subs = list(s.spec.submodules)
    gpus = tuple(range(s.topology.cluster.gpus))
    best = None
    caches = {sub.name: StepCache() for sub in subs}   # per submodule: its plans on all GPUs
    for choice in _baseline_choices(s, subs, len(gpus)):
        runs = {sub.name: evaluate_submodule(s.spec, sub, choice, gpus, s.topology, s.batch, s.precision,
                                             s.optimizer, cache=caches[sub.name]) for sub in subs}
        step = uniform_step(s.spec, s.topology, runs, s.batch)
        if best is None or step.step_s < best.step_s:
            best = step
    if best is None:
        raise UserError("no uniform plan fits in memory on this system", key_path="multimodal")
    return best
