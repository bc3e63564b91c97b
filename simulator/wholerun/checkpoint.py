"""Checkpoints: their size from the plan, their write and stall times, and the optimal interval.

Units: bytes, bytes/s, seconds (docs/whole_run.md, "Checkpoints").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from simulator.caching import memo
from simulator.errors import UserError
from simulator.memory import MemoryReport
from simulator.model.params import embedding_params, head_params, layer_params, param_counts
from simulator.plan.resolved import ResolvedPlan
from simulator.scenario.run_section import CheckpointSection
from simulator.yamlio import read_yaml

RATES = Path(__file__).parent / "data" / "checkpoint_rates.yaml"

#: buckets of the memory model a checkpoint saves (gradients are rebuilt by the next step)
SAVED_BUCKETS = ("weights", "main_params", "optimizer")


def weights_saved(rp: ResolvedPlan, writer: str) -> bool:
    """False for DeepSpeed's ZeRO-3 with a master copy (``rank_files`` writer, sharding stage 3, ``Recipe.main`` >
    0): its checkpoint holds no 16-bit weights. ZeRO-3 frees a partitioned parameter's data to an empty tensor
    (deepspeed/runtime/zero/partition_parameters.py ``free_param``), so the module state dict that
    ``_save_checkpoint`` writes carries none, and the optimizer file holds the fp32 partitions and the moments
    (runtime/zero/stage3.py ``_rigid_state_dict``: ``fp32_flat_groups`` and the optimizer's state dict;
    microsoft/DeepSpeed@38327e07); DeepSpeed's utils/zero_to_fp32.py rebuilds the weights from those partitions."""
    r = rp.recipe
    return not (writer == "rank_files" and r.stage >= 3 and r.main > 0)


def checkpoint_bytes(rp: ResolvedPlan, writer: str = "distributed") -> float:
    """Bytes of one checkpoint: the union over ranks of the saved states without replicas.

    Every parameter once, at the recipe's bytes per parameter of the weights, the fp32 master copy and the optimizer
    moments (``Recipe.param + main + moments``; e.g. 2 + 4 + 8 = 14 B for bf16 with Adam); without the weights where
    the ``writer`` does not save them (:func:`weights_saved`: DeepSpeed ZeRO-3, 4 + 8 = 12 B). Sharding changes who
    writes which piece, never the union (PyTorch DCP and Megatron's distributed checkpoint write each replicated
    piece once). MTP modules' parameters are included."""
    counts = param_counts(rp.model)
    params = counts["total"] + counts.get("mtp", 0)
    r = rp.recipe
    return params * ((r.param if weights_saved(rp, writer) else 0) + r.main + r.moments)


def rank_state_tensors(rp: ResolvedPlan) -> int:
    """State-dict entries one rank's save walks: its parameter tensors (every one, sharded or not: FSDP2 and ZeRO
    keep a shard of each on every rank) times ``1 + moment_count + 1`` with an optimizer (the tensor, its moments,
    Adam's ``step``), on the busiest pipeline stage of the plan's layout (``stage_layers``; the embedding on stage 0,
    the final norm and output layer on ``last_stage_rank``). A GLU's fc1 counts as two tensors (gate and up are
    separate in torchtitan and Hugging Face; Llama-3-70B: 80 x 9 + 3 = 723)."""
    model, r = rp.model, rp.recipe

    def count(tensors) -> int:
        return sum(2 if model.glu and t.name.endswith("fc1.weight") else 1 for t in tensors)

    def stage(s: int) -> int:
        return (sum(count(layer_params(model, i)) for i in rp.stage_layers[s])
                + (count(embedding_params(model)) if s == 0 else 0)
                + (count(head_params(model)) if s == rp.last_stage_rank else 0))

    params = max(stage(s) for s in range(rp.parallel.pp))
    return params * ((1 + r.moment_count + 1) if r.moments > 0 else 1)


def per_gpu_state_bytes(memory: MemoryReport) -> float:
    """Bytes of saved state one GPU holds (the largest over stages): what an async save copies device to host.

    Read from the memory model's items of :data:`SAVED_BUCKETS` (its sharding rules, one home)."""
    return max(sum(stage.bucket(b) for b in SAVED_BUCKETS) for stage in memory.stages)


@memo(maxsize=1, loaded=True)
def rates() -> dict[str, float]:
    """The measured host-side rates of a save (``data/checkpoint_rates.yaml``, each ``{value, source}``): bytes/s,
    and ``pinned_copy_efficiency`` as a fraction of the PCIe link."""
    return {k: float(v["value"]) for k, v in read_yaml(RATES).data.items()}


def writer_of(section: CheckpointSection, profile_writer: str) -> str:
    """``rank_files`` or ``distributed``: the section's choice, else the implementation profile's
    ``checkpoint_writer`` (DeepSpeed's ``save_checkpoint`` writes per-rank files; PyTorch DCP and Megatron's
    dist-checkpointing spread replicated pieces)."""
    return section.writer if section.writer != "auto" else profile_writer


def rank_write_bytes(writer: str, gpu_bytes: float, total_bytes: float, gpus: int, weights: bool = True) -> float:
    """Bytes the busiest rank writes. ``rank_files`` (DeepSpeed, deepspeed/runtime/pipe/module.py
    ``save_state_dict`` at microsoft/DeepSpeed@00f47f03: data-parallel rank 0 writes every layer of its stage unless
    ``checkpoint_parallel_write_pipeline``; each rank writes its own ZeRO optimizer partition): the GPU's own saved
    state, its full weights and its optimizer shard (:func:`per_gpu_state_bytes`); where the weights are not saved
    (``weights`` False, ZeRO-3: :func:`weights_saved`) its even partition, ``total / gpus``. ``distributed``: an even
    share, ``total / gpus`` (DCP's plan deduplication gives each replicated piece to the rank with the smallest plan
    so far; Megatron's fully parallel save, dist_checkpointing/strategies/fully_parallel.py, to the least loaded
    rank)."""
    return gpu_bytes if writer == "rank_files" and weights else total_bytes / gpus


def staging_seconds(gpu_bytes: float, staging: str, pcie_Bps: float, tensors: int = 0) -> float:
    """Seconds an async or in-memory save stalls to copy ``gpu_bytes`` to the host (measured rates, ``rates()``):
    ``cached_pinned`` ``bytes / (efficiency x PCIe)``; ``pinned`` adds the allocation, ``bytes / pinned_alloc_Bps``
    (cudaHostAlloc at every save); ``pageable`` ``bytes / min(pageable_copy_Bps, PCIe)``; plus the per-tensor
    host work of the blocking path, ``tensors x state_dict_s_per_tensor`` (state-dict calls and the stager's walk,
    :func:`rank_state_tensors`)."""
    r = rates()
    per_tensor_s = tensors * r["state_dict_s_per_tensor"]
    if staging == "pageable":
        return gpu_bytes / min(r["pageable_copy_Bps"], pcie_Bps) + per_tensor_s
    copy_s = gpu_bytes / (r["pinned_copy_efficiency"] * pcie_Bps)
    return copy_s + (gpu_bytes / r["pinned_alloc_Bps"] if staging == "pinned" else 0.0) + per_tensor_s


@dataclass(frozen=True)
class CheckpointCost:
    """One checkpoint's cost: ``bytes`` in all, ``write_s`` to durable storage, ``stall_s`` of training."""

    bytes: float
    write_s: float
    stall_s: float
    load_s: float
    mode: str


def write_seconds(total_bytes: float, nodes: int, per_node_Bps: float, filesystem_Bps: float | None) -> float:
    """``total_bytes / min(nodes * per_node_Bps, filesystem_Bps)``: every node writes its share in parallel,
    capped by the file system's aggregate bandwidth."""
    bandwidth = nodes * per_node_Bps
    if filesystem_Bps is not None:
        bandwidth = min(bandwidth, filesystem_Bps)
    return total_bytes / bandwidth


def checkpoint_cost(total_bytes: float, gpu_bytes: float, nodes: int, pcie_Bps: float, section: CheckpointSection,
                    storage_Bps: float, rank_bytes: float = 0.0, writer: str = "distributed", tensors: int = 0
                    ) -> CheckpointCost:
    """What a checkpoint stalls, by mode:

    - ``sync``: the full write (training waits for ``torch.save`` / DCP ``save`` to return): the longer of the
      aggregate write (:func:`write_seconds`) and the busiest rank's serial ``torch.save``, ``rank_bytes /
      rank_write_Bps`` (:func:`rank_write_bytes`; the measured rate of ``torch.save`` for ``rank_files``, of a one-rank
      DCP ``save`` for ``distributed``);
    - ``async``: the device-to-host staging of the GPU's own state (PyTorch DCP ``async_save`` stages the state dict
      in CPU memory, then writes in the background; Megatron ``--async-save`` likewise), :func:`staging_seconds` of
      ``tensors`` state-dict entries;
      the write continues behind training;
    - ``in_memory``: the same copy to host memory (a peer keeps a replica: Wang et al. SOSP'23 "Gemini"); the
      durable write is left out of the critical path and recovery loads from host memory.
    """
    rank_Bps = section.rank_write_Bps or rates()["rank_write_Bps_" + ("torch_save" if writer == "rank_files" else "dcp")]
    write_s = max(write_seconds(total_bytes, nodes, storage_Bps, section.filesystem_Bps), rank_bytes / rank_Bps)
    copy_s = staging_seconds(gpu_bytes, section.staging, pcie_Bps, tensors)
    read_Bps = section.read_Bps_per_node or storage_Bps
    if section.mode == "sync":
        return CheckpointCost(total_bytes, write_s, write_s, write_seconds(total_bytes, nodes, read_Bps,
                                                                             section.filesystem_Bps), "sync")
    if section.mode == "async":
        return CheckpointCost(total_bytes, write_s, copy_s, write_seconds(total_bytes, nodes, read_Bps,
                                                                            section.filesystem_Bps), "async")
    return CheckpointCost(total_bytes, copy_s, copy_s, copy_s, "in_memory")


def young_interval(stall_s: float, mtbf_s: float) -> float:
    """Young (1974, CACM 17(9)), first-order optimum: ``tau = sqrt(2 * delta * M)`` (delta: checkpoint stall, M: mean
    time between failures), seconds of work between checkpoints."""
    return math.sqrt(2.0 * stall_s * mtbf_s)


def daly_interval(stall_s: float, mtbf_s: float) -> float:
    """Daly (2006, FGCS 22(3)), Eq. 37, higher-order optimum:
    ``tau = sqrt(2 delta M) * (1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9) - delta`` for ``delta < 2M``, else ``M``."""
    if stall_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = stall_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * stall_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - stall_s


def interval_seconds(section: CheckpointSection, cost: CheckpointCost, mtbf_s: float) -> float:
    """Seconds of productive work between checkpoints: fixed, or Young's / Daly's optimum for the stall; never shorter
    than the background write of an async save (the next save waits for the previous one)."""
    if isinstance(section.interval_s, float):
        return section.interval_s
    if math.isinf(mtbf_s):
        raise UserError("no failures are expected (every rate is 0): an optimal interval is undefined; give a fixed "
                        "interval_s", key_path="run.checkpoint.interval_s")
    rule = young_interval if section.interval_s == "young" else daly_interval
    tau = rule(cost.stall_s, mtbf_s)
    return max(tau, cost.write_s - cost.stall_s) if cost.mode == "async" else tau
