"""Megatron-LM's way with a multimodal model: one monolithic pipeline over the concatenated layers of every
submodule (DistMM section 2.1: existing systems "treat all submodules as a monolithic entity").

The layers of the submodules, in data-flow order (the vision tower's, then the text tower's), are split over the
pp stages by count, as Megatron-LM splits a stack (``num_layers / pp`` each, the remainder to the first stages).
A vision layer (257 tokens at width 1024 for ViT-L/14) and a text layer (77 tokens at width 768) cost very
different times, so equal layer counts give unequal stages, and a pipeline runs at the pace of its slowest stage.

Each submodule is timed by the engine with the plan's tp and dp and one stage (``pp = 1``, on the first stage's
GPUs); its per-micro-batch forward and backward, spread evenly over its layers (embedding and head included),
give each stage's cost; the batch-sync (GPipe) timeline of :func:`simulator.schedule.timeline.run_timeline` over
:func:`simulator.plan.pipeline.stage_orders` gives the pipeline; each stage's data-parallel gradient reduction and
optimizer step are the submodules' one-stage tails times the share of their layers the stage holds, as is its
memory (states and in-flight activations scale with the layers held). Assumption: the tail and memory shares are
linear in the layer share (embedding tables are spread with the layers).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.multimodal.compose import contrastive_loss_s, last_stage_ranks
from simulator.multimodal.evaluate import PlanChoice, SubmoduleRun, evaluate_submodule
from simulator.plan.rules import data_parallel
from simulator.plan.schedules import GPIPE
from simulator.schedule.timeline import run_timeline
from simulator.units import GIBI


@dataclass(frozen=True)
class MonolithicStep:
    """One step of the monolithic pipeline."""

    choice: PlanChoice
    runs: dict[str, SubmoduleRun]
    """Each submodule on the first stage's GPUs with pp = 1 (the source of its per-layer costs)."""
    stage_layers: tuple[dict[str, int], ...]
    stage_busy_s: tuple[float, ...]
    stage_memory_bytes: tuple[float, ...]
    pipeline_s: float
    tail_s: float
    loss_s: float
    global_batch: int
    runtime_bytes: float

    @property
    def step_s(self) -> float:
        return self.pipeline_s + self.tail_s + self.loss_s

    @property
    def stage_imbalance(self) -> float:
        """Busiest stage over the mean stage (1 = balanced)."""
        return max(self.stage_busy_s) / (sum(self.stage_busy_s) / len(self.stage_busy_s))

    @property
    def device_peak_bytes(self) -> float:
        return max(self.stage_memory_bytes) + self.runtime_bytes

    def to_dict(self) -> dict:
        return {"strategy": "monolithic", "step_s": self.step_s, "plan": self.choice.to_dict(),
                "stage_layers": [dict(s) for s in self.stage_layers], "stage_busy_s": list(self.stage_busy_s),
                "stage_imbalance": self.stage_imbalance, "pipeline_s": self.pipeline_s, "tail_s": self.tail_s,
                "loss_s": self.loss_s, "device_peak_bytes": self.device_peak_bytes,
                "peak_GiB": self.device_peak_bytes / GIBI}


def split_layers(counts: list[tuple[str, int]], pp: int) -> list[dict[str, int]]:
    """Megatron's split of the concatenated layers: ``total // pp`` per stage, the remainder to the first stages.
    Returns, per stage, how many layers of each submodule it holds."""
    flat = [name for name, n in counts for _ in range(n)]
    base, extra = divmod(len(flat), pp)
    out, start = [], 0
    for s in range(pp):
        n = base + (1 if s < extra else 0)
        held: dict[str, int] = {}
        for name in flat[start:start + n]:
            held[name] = held.get(name, 0) + 1
        out.append(held)
        start += n
    return out


def _one_stage_costs(run: SubmoduleRun) -> tuple[float, float, float]:
    """(forward, backward) seconds of one micro-batch of the whole submodule on one stage, and its tail (exposed
    DP communication and optimizer after the pipeline)."""
    tl = run.step.op_timelines()[0]
    ops = {(k, j): end - begin for k, j, _, begin, end in tl.ops}
    cross = (run.cross_attention_s + run.pooler_s) / run.plan.num_microbatches   # fwd + bwd, one micro-batch
    return ops[("F", 0)] + cross / 3, ops[("B", 0)] + 2 * cross / 3, run.step.step_s - tl.end_s


def monolithic_step(s, choice: PlanChoice) -> MonolithicStep:
    """The monolithic pipeline of ``choice`` (tp, pp, dp, micro-batch, recompute for every layer) on all GPUs of
    ``s.topology``; ``s`` is a :class:`simulator.multimodal.balance.Settings`."""
    subs = list(s.spec.submodules)
    one = replace(choice, pp=1)
    stage0 = tuple(r for d in range(choice.dp) for r in range(choice.tp * d, choice.tp * (d + 1)))
    runs = {sub.name: evaluate_submodule(s.spec, sub, one, stage0, s.topology, s.batch, s.precision, s.optimizer)
            for sub in subs}
    layers = split_layers([(sub.name, sub.layers) for sub in subs], choice.pp)
    costs = {n: _one_stage_costs(r) for n, r in runs.items()}
    share = [{n: held.get(n, 0) / s.spec.submodule(n).layers for n in runs} for held in layers]
    fwd = [[sum(costs[n][0] * f for n, f in sh.items())] for sh in share]
    bwd = [[sum(costs[n][1] * f for n, f in sh.items())] for sh in share]
    tails = [sum(costs[n][2] * f for n, f in sh.items()) for sh in share]
    memory = [sum(runs[n].stage_peaks[0] * f for n, f in sh.items()) for sh in share]
    m = next(iter(runs.values())).plan.num_microbatches
    p2p = max(r.step.p2p_s for r in runs.values())
    if choice.pp > 1:   # the boundary transfer of a pp = 1 run is not priced: take it from a two-stage neighbour
        p2p = _boundary_s(s, choice, subs)
    timelines = run_timeline(GPIPE.orders(choice.pp, 1, m), fwd, bwd, p2p)
    ends = [t.end_s + tail for t, tail in zip(timelines, tails, strict=True)]
    pipeline = max(t.end_s for t in timelines)
    last = runs[subs[-1].name]
    loss, _ = contrastive_loss_s(s.spec, s.topology, last_stage_ranks(last), s.batch, last)
    return MonolithicStep(choice, runs, tuple(layers), tuple(t.busy_s for t in timelines), tuple(memory),
                          pipeline, max(ends) - pipeline, loss, s.batch,
                          next(iter(runs.values())).memory.runtime_bytes)


def _boundary_s(s, choice: PlanChoice, subs) -> float:
    """One pipeline boundary sendrecv of the widest submodule's activations (micro_batch x tokens x h), priced by
    the engine on a two-stage run of that submodule over the first 2 tp dp GPUs."""
    widest = max(subs, key=lambda sub: s.spec.seq_len(sub) * sub.hidden)
    two = replace(choice, pp=2)
    run = evaluate_submodule(s.spec, widest, two, tuple(range(two.gpus)), s.topology, s.batch, s.precision,
                             s.optimizer)
    return run.step.p2p_s


def _fits(s, choice: PlanChoice) -> bool:
    """Whether every stage of the monolithic pipeline fits (the layer-share memory rule of the module docstring)."""
    from simulator.multimodal.balance import _capacity, stage_peaks

    one = replace(choice, pp=1)
    peaks = {}
    for sub in s.spec.submodules:
        p = stage_peaks(s, sub, one)
        if p is None:
            return False
        peaks[sub.name] = p[0]
    layers = split_layers([(sub.name, sub.layers) for sub in s.spec.submodules], choice.pp)
    worst = max(sum(peaks[n] * k / s.spec.submodule(n).layers for n, k in held.items()) for held in layers)
    return worst <= _capacity(s)


def monolithic_plan(s) -> MonolithicStep | None:
    """The fastest monolithic pipeline that fits: every (tp inside a node dividing all heads, pp in 1, 2, 4, 8,
    dp = GPUs / (tp pp)), the first recompute setting (none, selective, full) and the largest baseline
    micro-batch (:func:`simulator.multimodal.balance.baseline_micro_batches`: the whole replica batch under a
    contrastive loss) that fit. None when no plan fits."""
    from simulator.errors import UserError
    from simulator.multimodal.balance import _RECOMPUTE, baseline_micro_batches, searched_choice

    node, total = s.topology.cluster.node.gpus, s.topology.cluster.gpus
    layers = sum(sub.layers for sub in s.spec.submodules)
    best = None
    for tp in (1, 2, 4, 8):
        if tp > node or any(sub.heads % tp for sub in s.spec.submodules):
            continue
        for pp in (1, 2, 4, 8):
            dp = data_parallel(total, tp=tp, pp=pp)
            if dp is None or pp > layers:
                continue
            for recompute in _RECOMPUTE:
                fit = next((mb for mb in baseline_micro_batches(s.spec, s.batch, dp)
                            if _fits(s, searched_choice(tp, pp, dp, mb, recompute))), None)
                if fit is None:
                    continue
                try:
                    step = monolithic_step(s, searched_choice(tp, pp, dp, fit, recompute))
                except UserError:   # a group the collectives model cannot place evenly
                    break
                if best is None or step.step_s < best.step_s:
                    best = step
                break
    return best
