"""Checkpoints: their size from the plan, their write and stall times, and the optimal interval.

Units: bytes, bytes/s, seconds (docs/whole_run.md, "Checkpoints").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.errors import UserError
from simulator.memory import MemoryReport
from simulator.model.params import param_counts
from simulator.plan.resolved import ResolvedPlan
from simulator.scenario.run_section import CheckpointSection

#: buckets of the memory model a checkpoint saves (gradients are rebuilt by the next step)
SAVED_BUCKETS = ("weights", "main_params", "optimizer")


def checkpoint_bytes(rp: ResolvedPlan) -> float:
    """Bytes of one checkpoint: the union over ranks of the saved states without replicas.

    Every parameter once, at the recipe's bytes per parameter of the weights, the fp32 master copy and the optimizer
    moments (``Recipe.param + main + moments``; e.g. 2 + 4 + 8 = 14 B for bf16 with Adam). Sharding changes who
    writes which piece, never the union (PyTorch DCP and Megatron's distributed checkpoint write each replicated
    piece once). MTP modules' parameters are included."""
    counts = param_counts(rp.model)
    params = counts["total"] + counts.get("mtp", 0)
    r = rp.recipe
    return params * (r.param + r.main + r.moments)


def per_gpu_state_bytes(memory: MemoryReport) -> float:
    """Bytes of saved state one GPU holds (the largest over stages): what an async save copies device to host.

    Read from the memory model's items of :data:`SAVED_BUCKETS` (its sharding rules, one home)."""
    return max(sum(stage.bucket(b) for b in SAVED_BUCKETS) for stage in memory.stages)


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


def checkpoint_cost(total_bytes: float, gpu_bytes: float, nodes: int, host_copy_Bps: float, section: CheckpointSection,
                    storage_Bps: float) -> CheckpointCost:
    """What a checkpoint stalls, by mode:

    - ``sync``: the full write (training waits for ``torch.save`` / DCP ``save`` to return);
    - ``async``: the device-to-host copy of the GPU's own state (PyTorch DCP ``async_save`` stages the state dict
      in CPU memory, then writes in a background thread; Megatron ``--async-save`` likewise), ``gpu_bytes /
      host_copy_Bps``; the write continues behind training;
    - ``in_memory``: the same copy to host memory (a peer keeps a replica: Wang et al. SOSP'23 "Gemini"); the
      durable write is left out of the critical path and recovery loads from host memory.
    """
    write_s = write_seconds(total_bytes, nodes, storage_Bps, section.filesystem_Bps)
    copy_s = gpu_bytes / host_copy_Bps
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
