"""A multimodal step from its submodules' runs: DistMM's concurrent plan or the uniform colocated plan.

- **DistMM** (submodules on disjoint GPUs, running at once): step = max over submodules of their step + the exchange
  between submodules + the loss. A submodule whose tokens feed another's layers (CoCa's cross-attention, LLaVA's
  LLM) also delays the consumer by one forward micro-batch of the producer (the fill: the consumer's first
  micro-batch waits for it).
- **Uniform** (every submodule on every GPU with one plan, Megatron-style): the submodules run one after the other
  on the same GPUs: step = sum of their steps + the loss; every GPU holds a stage of every submodule, so its memory
  is the sum of the submodules' stage memories.

Exchange (DistMM), one per edge of :meth:`MultimodalSpec.token_edges`: the producer replicas' last stages send
the image embeddings (contrastive: B x e), the image tokens (cross-attention, LLM: B x N x h_v) or a decoder's
token states (CoCa's unimodal to multimodal decoder: B x T x h) to the consumer's replicas, pair by pair at once,
forward and the gradient back (:func:`edge_transfer`, priced by :func:`simulator.pricing.exchange.pairs_exchange_s` on the
placed GPUs). Loss (contrastive): :mod:`simulator.multimodal.loss`
on the consumer's last-stage ranks: two all-gathers and two reduce-scatters of B x e, and the logits GEMMs.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.compute.gemm import DTYPE_BYTES
from simulator.multimodal.evaluate import SubmoduleRun, priced
from simulator.multimodal.loss import ContrastiveCost
from simulator.multimodal.spec import MultimodalSpec, TokenEdge
from simulator.pricing.exchange import group_call_s, pairs_exchange_s
from simulator.program.multimodal import contrastive_logits_program
from simulator.topology import Topology
from simulator.units import GIBI


@dataclass(frozen=True)
class MultimodalStep:
    """One multimodal training step: the submodules' runs, how they combine, and the time parts."""

    strategy: str
    """``distmm`` or ``uniform``."""
    placement: str
    runs: dict[str, SubmoduleRun]
    exchange_s: float
    exchange_link: str
    fill_s: float
    loss_s: float
    loss_comm_s: float
    global_batch: int
    loss_bytes: float = 0.0
    """Per-GPU bytes of the contrastive logits a loss rank keeps for the backward (two b x B fp32 matrices)."""
    loss_submodule: str | None = None
    """The submodule whose last-stage ranks compute the loss (DistMM); every GPU may for uniform."""

    @property
    def submodules_s(self) -> float:
        """The submodules' part of the step: the slowest (DistMM) or the sum (uniform)."""
        times = [r.step_s for r in self.runs.values()]
        return sum(times) if self.strategy == "uniform" else max(times)

    @property
    def step_s(self) -> float:
        return self.submodules_s + self.exchange_s + self.fill_s + self.loss_s

    @property
    def gpus(self) -> int:
        if self.strategy == "uniform":
            return next(iter(self.runs.values())).choice.gpus
        return sum(r.choice.gpus for r in self.runs.values())

    @property
    def samples_per_s(self) -> float:
        return self.global_batch / self.step_s

    @property
    def device_peak_bytes(self) -> float:
        """Largest per-GPU device memory: per submodule (DistMM: the loss submodule's plus the contrastive logits) or
        summed per stage over submodules (uniform; the stages' transient buffers are summed too: conservative),
        plus the logits."""
        runs = list(self.runs.values())
        if self.strategy != "uniform":
            return max(r.device_peak_bytes + (self.loss_bytes if n == self.loss_submodule else 0.0)
                       for n, r in self.runs.items())
        stages = max(len(r.stage_peaks) for r in runs)
        per_stage = [sum(r.stage_peaks[s] for r in runs if s < len(r.stage_peaks)) for s in range(stages)]
        return max(per_stage) + runs[0].memory.runtime_bytes + self.loss_bytes

    @property
    def oom(self) -> bool:
        cap = next(iter(self.runs.values())).memory.hbm_capacity_bytes
        return cap is not None and self.device_peak_bytes > cap

    @property
    def imbalance(self) -> float:
        """Slowest over fastest submodule step (DistMM's data load balancer drives it towards 1)."""
        times = [r.step_s for r in self.runs.values()]
        return max(times) / min(times)

    def to_dict(self) -> dict:
        return {"strategy": self.strategy, "placement": self.placement, "gpus": self.gpus, "step_s": self.step_s,
                "samples_per_s": self.samples_per_s, "submodules_s": self.submodules_s,
                "exchange_s": self.exchange_s, "exchange_link": self.exchange_link, "fill_s": self.fill_s,
                "loss_s": self.loss_s, "loss_comm_s": self.loss_comm_s, "loss_bytes": self.loss_bytes,
                "imbalance": self.imbalance,
                "device_peak_bytes": self.device_peak_bytes, "peak_GiB": self.device_peak_bytes / GIBI,
                "oom": self.oom}


def last_stage_ranks(run: SubmoduleRun) -> list[int]:
    """Global GPUs of TP rank 0 of the last stage of every replica (rank = tp_i + tp (dp_i + dp pp_i), Megatron's
    default order)."""
    return stage_ranks(run, run.choice.pp - 1)


def first_stage_ranks(run: SubmoduleRun) -> list[int]:
    return stage_ranks(run, 0)


def contrastive_loss_s(spec: MultimodalSpec, topology: Topology, ranks: list[int], batch: int, run: SubmoduleRun
                       ) -> tuple[float, float]:
    """(total, communication) seconds of the contrastive loss on ``ranks`` (module docstring): the embeddings'
    all-gathers and reduce-scatters on the loss ranks' group, and the logits' program
    (:func:`simulator.program.multimodal.contrastive_logits_program`) forward and backward."""
    if "contrastive" not in spec.loss:
        return 0.0, 0.0
    cost, dtype = _contrastive(spec, topology, ranks, batch, run)
    comm = cost.gathers * (group_call_s(topology, ranks, "all_gather", cost.all_gather_bytes)
                           + group_call_s(topology, ranks, "reduce_scatter", cost.all_gather_bytes))
    logits = priced(contrastive_logits_program(cost.local_rows, spec.embed_dim, batch, dtype),
                    topology.cluster.node.gpu)
    return comm + (logits.fwd_s + logits.bwd_s), comm


def _contrastive(spec: MultimodalSpec, topology: Topology, ranks: list[int], batch: int, run: SubmoduleRun
                 ) -> tuple[ContrastiveCost, str]:
    dtype = run.plan.gemm_dtype(topology.cluster.node.gpu)
    return ContrastiveCost(batch, spec.embed_dim, len(ranks), DTYPE_BYTES[dtype]), dtype


def loss_bytes(spec: MultimodalSpec, topology: Topology, ranks: list[int], batch: int, run: SubmoduleRun) -> float:
    """Per-rank logits bytes of the contrastive loss (0 for other losses)."""
    if "contrastive" not in spec.loss:
        return 0.0
    return _contrastive(spec, topology, ranks, batch, run)[0].logits_bytes_per_rank


def stage_ranks(run: SubmoduleRun, stage: int) -> list[int]:
    """Global GPUs of TP rank 0 of pipeline stage ``stage`` of every replica (Megatron's default order)."""
    c = run.choice
    return [run.gpus[c.tp * (d + c.dp * stage)] for d in range(c.dp)]


def edge_transfer(topology: Topology, runs: dict[str, SubmoduleRun], edge: TokenEdge, batch: int, dtype_bytes: int
                  ) -> tuple[list[tuple[int, int]], float]:
    """The (sender, receiver) GPU pairs of one exchange (:meth:`MultimodalSpec.token_edges`) and the bytes each
    pair sends one way: the producer's last-stage ranks send B x elements x bytes to the consumer's first-stage
    ranks (tokens into its layers), to every stage's ranks (cross-attention: each stage's layers read the image
    tokens, so each stage receives the batch's tokens: x pp), or to its last-stage ranks (an embedding for the
    loss), spread over min(senders, receivers) concurrent pairs (:func:`pair_up`). (The TP peers of a receiver get the tokens over
    NVLink from it; not priced.)"""
    src, dst = runs[edge.producer], runs[edge.consumer]
    senders = last_stage_ranks(src)
    if edge.cross_attention:
        stages = list(range(dst.choice.pp))
    else:
        stages = [0] if edge.into_layers else [dst.choice.pp - 1]
    receivers = [r for st in stages for r in stage_ranks(dst, st)]
    n = min(len(senders), len(receivers))
    return pair_up(topology, senders, receivers), batch * edge.elements * dtype_bytes * len(stages) / n


def pair_up(topology: Topology, senders: list[int], receivers: list[int]) -> list[tuple[int, int]]:
    """min(senders, receivers) (sender, receiver) pairs, each GPU in at most one: every GPU of the shorter list
    takes a partner on its own node where one is free (the placement manager keeps heavy traffic on NVLink), else
    the first free one, in order."""
    node = [topology.domain_of(g) for g in topology.gpus]
    short, long_ = (senders, receivers) if len(senders) <= len(receivers) else (receivers, senders)
    free = list(long_)
    pairs = []
    for g in short:
        mate = next((x for x in free if node[x] == node[g]), free[0])
        free.remove(mate)
        pairs.append((g, mate) if short is senders else (mate, g))
    return pairs


def edge_s(topology: Topology, runs: dict[str, SubmoduleRun], edge: TokenEdge, batch: int) -> tuple[float, str]:
    """(seconds, link) of one exchange, forward and gradient back (:func:`edge_transfer` twice, priced by
    :func:`simulator.pricing.exchange.pairs_exchange_s` on the placed GPUs)."""
    width = DTYPE_BYTES[runs[edge.producer].plan.gemm_dtype(topology.cluster.node.gpu)]
    pairs, nbytes = edge_transfer(topology, runs, edge, batch, width)
    t, link = pairs_exchange_s(topology, pairs, nbytes)
    return 2 * t, link


def _exchange(spec: MultimodalSpec, topology: Topology, runs: dict[str, SubmoduleRun], batch: int
              ) -> tuple[float, str, float]:
    """(exchange seconds, link, fill seconds) between the submodules (DistMM). The exchanges are summed (they end
    at one consumer's links in CoCa; conservative when they do not); the link is the slowest exchange's. Fill: a
    consumer's first micro-batch waits for one forward micro-batch of the producers feeding its layers (they run
    at once: the slowest of them); the consumers' fills run at once too."""
    if len(runs) < 2:
        return 0.0, "local", 0.0
    total, slowest, link = 0.0, -1.0, "local"
    fill: dict[str, float] = {}
    for edge in spec.token_edges():
        t, how = edge_s(topology, runs, edge, batch)
        total += t
        if t > slowest:
            slowest, link = t, how
        if edge.into_layers:   # the consumer's first micro-batch waits for one forward micro-batch of the producer
            fill[edge.consumer] = max(fill.get(edge.consumer, 0.0), runs[edge.producer].forward_microbatch_s)
    return total, link, max(fill.values(), default=0.0)


def distmm_step(spec: MultimodalSpec, topology: Topology, runs: dict[str, SubmoduleRun], batch: int,
                placement: str) -> MultimodalStep:
    exchange, link, fill = _exchange(spec, topology, runs, batch)
    text = spec.contrastive_text
    consumer = runs[text.name] if text is not None else next(
        (r for n, r in runs.items() if spec.vision is None or n != spec.vision.name), next(iter(runs.values())))
    ranks = last_stage_ranks(consumer)
    loss, loss_comm = contrastive_loss_s(spec, topology, ranks, batch, consumer)
    return MultimodalStep("distmm", placement, runs, exchange, link, fill, loss, loss_comm, batch,
                          loss_bytes(spec, topology, ranks, batch, consumer), consumer.sub.name)


def uniform_step(spec: MultimodalSpec, topology: Topology, runs: dict[str, SubmoduleRun], batch: int
                 ) -> MultimodalStep:
    run = next(iter(runs.values()))
    ranks = last_stage_ranks(run)
    loss, loss_comm = contrastive_loss_s(spec, topology, ranks, batch, run)
    return MultimodalStep("uniform", "colocated", runs, 0.0, "local", 0.0, loss, loss_comm, batch,
                          loss_bytes(spec, topology, ranks, batch, run))
