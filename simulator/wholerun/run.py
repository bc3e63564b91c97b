"""A whole training run from one step: time to train, checkpoints, failures, goodput, energy and cost.

:func:`run_steps` says how many steps of which batch the run takes; the caller prices one step per batch;
:func:`whole_run` puts them together (docs/whole_run.md). Units: SI (s, J, bytes); days, MWh, GPU-hours only in
:meth:`WholeRun.to_dict`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.errors import UserError
from simulator.hardware.cluster import ClusterSpec
from simulator.hardware.gpu import pcie_bandwidth_Bps
from simulator.memory import MemoryReport
from simulator.plan.resolved import ResolvedPlan
from simulator.scenario.run_section import RunSection
from simulator.schedule import StepResult
from simulator.wholerun.checkpoint import (
    CheckpointCost,
    checkpoint_bytes,
    checkpoint_cost,
    interval_seconds,
    per_gpu_state_bytes,
    rank_state_tensors,
    rank_write_bytes,
    weights_saved,
    writer_of,
)
from simulator.wholerun.energy import Energy, gpu_power, node_overhead_W, run_energy, step_energy_J
from simulator.wholerun.expectation import TimeBreakdown, expected_time
from simulator.wholerun.failures import RestartCost, component_counts, failure_rate_per_s, restart_cost
from simulator.wholerun.montecarlo import Distribution, sample
from simulator.wholerun.units import DAY, HOUR, J_PER_KWH, J_PER_MWH, KG_PER_TONNE


def run_steps(section: RunSection, global_batch: int, seq_len: int) -> list[tuple[int, float]]:
    """(global batch, steps) of each stage of the run: the ramp's stages, then the rest at ``global_batch``.
    Steps from tokens are ``tokens / (batch x seq_len)``, fractional (an expectation, not a count)."""
    if section.steps is not None:
        return [(global_batch, float(section.steps))]
    stages = [(s.global_batch, s.tokens) for s in section.batch_ramp or ()]
    rest = section.tokens - sum(tokens for _, tokens in stages)
    return [(batch, tokens / (batch * seq_len)) for batch, tokens in [*stages, (global_batch, rest)]]


@dataclass(frozen=True)
class WholeRun:
    """The run's predictions (docs/interface.md, the run: keys; every field defined in docs/whole_run.md)."""

    tokens: float
    steps: float
    gpus: int
    spare_gpus: int
    time: TimeBreakdown
    checkpoint: CheckpointCost
    interval_s: float
    mtbf_s: float
    restart: RestartCost
    energy: Energy
    gpu_hour_price: float | None
    carbon_kg_per_kWh: float | None
    monte_carlo: Distribution | None = None

    @property
    def gpu_hours(self) -> float:
        return (self.gpus + self.spare_gpus) * self.time.wall_s / HOUR

    @property
    def cost(self) -> float | None:
        return None if self.gpu_hour_price is None else self.gpu_hours * self.gpu_hour_price

    @property
    def carbon_t(self) -> float | None:
        if self.carbon_kg_per_kWh is None:
            return None
        return self.energy.total_J / J_PER_KWH * self.carbon_kg_per_kWh / KG_PER_TONNE

    def to_dict(self) -> dict:
        t, c, e = self.time, self.checkpoint, self.energy
        return {
            "days": t.wall_s / DAY, "wall_s": t.wall_s, "gpu_hours": self.gpu_hours, "goodput": t.goodput,
            "interruptions": t.interruptions, "mtbf_s": self.mtbf_s, "tokens": self.tokens, "steps": self.steps,
            "time_s": {"productive": t.productive_s, "checkpoint": t.checkpoint_s, "lost": t.lost_s,
                       "restart": t.restart_s},
            "checkpoint": {"bytes": c.bytes, "interval_s": self.interval_s, "stall_s": c.stall_s,
                           "write_s": c.write_s, "load_s": c.load_s, "mode": c.mode},
            "restart_s": {"reschedule": self.restart.reschedule_s, "init": self.restart.init_s,
                          "nccl_init": self.restart.nccl_init_s, "load": self.restart.load_s,
                          "warmup": self.restart.warmup_s, "total": self.restart.total_s},
            "energy_MWh": e.total_J / J_PER_MWH,
            "energy_parts_MWh": {"gpu_busy": e.gpu_busy_J / J_PER_MWH, "gpu_idle": e.gpu_idle_J / J_PER_MWH,
                                 "node": e.node_J / J_PER_MWH, "network": e.network_J / J_PER_MWH,
                                 "facility": (e.total_J - e.it_J) / J_PER_MWH},
            "tokens_per_J": self.tokens / e.total_J, "cost": self.cost, "carbon_t": self.carbon_t,
            **({"monte_carlo": self.monte_carlo.to_dict()} if self.monte_carlo else {}),
        }


def _storage_Bps(section: RunSection, cluster: ClusterSpec) -> float:
    """The per-node write bandwidth to the checkpoint's target: the override, else the node profile's."""
    ck = section.checkpoint
    if ck.write_Bps_per_node is not None or ck.mode == "in_memory":
        return ck.write_Bps_per_node or math.inf
    storage = cluster.node.storage
    value = None if storage is None else (storage.local_write if ck.target == "local_nvme" else storage.network_write)
    if value is None:
        raise UserError(f"node profile {cluster.node.name} gives no {ck.target} write bandwidth: set "
                        "run.checkpoint.write_Bps_per_node", key_path="run.checkpoint.write_Bps_per_node")
    return value


def _cost(section: RunSection, rp: ResolvedPlan, cluster: ClusterSpec, gpu_state_bytes: float, gpus: int
          ) -> CheckpointCost:
    gpu = cluster.node.gpu
    pcie = pcie_bandwidth_Bps(gpu.pcie.generation, gpu.pcie.lanes)
    writer = writer_of(section.checkpoint, rp.training.profile.checkpoint_writer)
    total = checkpoint_bytes(rp, writer)
    rank_bytes = rank_write_bytes(writer, gpu_state_bytes, total, gpus, weights_saved(rp, writer))
    return checkpoint_cost(total, gpu_state_bytes, math.ceil(gpus / cluster.node.gpus), pcie, section.checkpoint,
                           _storage_Bps(section, cluster), rank_bytes, writer, rank_state_tensors(rp))


def whole_run(section: RunSection, rp: ResolvedPlan, cluster: ClusterSpec, gpus: int,
              memory: MemoryReport | float, stages: list[tuple[float, StepResult]]) -> WholeRun:
    """The run of ``stages`` ((steps, that batch's step)) on ``gpus`` GPUs of ``cluster``; ``memory`` is the plan's
    memory report or the saved state bytes one GPU holds (:func:`per_gpu_state_bytes`)."""
    nodes = math.ceil(gpus / cluster.node.gpus)
    rate = failure_rate_per_s(component_counts(cluster, gpus), section.failures)
    mtbf = 1.0 / rate if rate > 0 else math.inf
    gpu_state = memory if isinstance(memory, float | int) else per_gpu_state_bytes(memory)
    cost = _cost(section, rp, cluster, gpu_state, gpus)
    productive = sum(n * step.step_s for n, step in stages)
    interval = interval_seconds(section.checkpoint, cost, mtbf)
    if isinstance(section.checkpoint.interval_s, float) and interval > productive:
        file, line = section.where("checkpoint.interval_s")
        raise UserError(f"a checkpoint every {interval:g} s is longer than the run's {productive:.0f} s of steps",
                        file=file, line=line, key_path="run.checkpoint.interval_s")
    restart = restart_cost(section.restart, section.failures, cost.load_s, gpus)
    lag = cost.write_s - cost.stall_s if cost.mode == "async" else 0.0
    time = expected_time(productive, interval, cost.stall_s, rate, restart.total_s, lag)
    power = gpu_power(cluster.node.gpu)
    busy_W = sum(n * step_energy_J(step, power) for n, step in stages) / productive
    spare_gpus = section.failures.hot_spares * cluster.node.gpus
    energy = run_energy(busy_s=time.productive_s + time.lost_s, busy_W=busy_W, idle_W=power.idle_W, gpus=gpus,
                        spare_gpus=spare_gpus, wall_s=time.wall_s,
                        node_W=node_overhead_W(cluster.node.gpu, cluster.node.gpus), nodes=nodes + section.failures.hot_spares,
                        network_W_per_gpu=section.network_W_per_gpu, pue=section.pue)
    mc = section.monte_carlo
    distribution = (sample(productive, interval, cost.stall_s, rate, restart.total_s, lag, mc.samples, mc.seed)
                    if mc is not None else None)
    tokens = section.tokens if section.tokens is not None else sum(
        n * rp.training.global_batch * rp.training.seq_len for n, _ in stages)
    return WholeRun(tokens, sum(n for n, _ in stages), gpus, spare_gpus, time, cost, interval, mtbf, restart, energy,
                    section.gpu_hour_price, section.carbon_kg_per_kWh, distribution)
