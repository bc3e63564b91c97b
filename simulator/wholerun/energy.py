"""Energy of a run: board power by phase of the step and of the stalls, node overheads, PUE.

Units: W, J, s (docs/whole_run.md, "Energy"). Energy = PUE x sum over phases of (seconds x power).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.hardware.gpu import GpuPower, GpuSpec
from simulator.schedule import StepResult

#: the H200's measured board power by load (simulator/validation/data/h200_power/power.jsonl) over its 700 W limit:
#: a GPU without a measured ``power`` gets its datasheet TDP times these ratios
H200_MEASURED_W = {"compute_W": 692.4, "memory_bound_W": 487.6, "host_bound_W": 125.1, "idle_W": 124.4}
H200_LIMIT_W = 700.0

#: non-GPU power of an 8-GPU node at the maximum, W: NVIDIA DGX H100 datasheet "system power usage ~10.2 kW max"
#: minus 8 x 700 W of GPU boards; other nodes scale it by their GPUs' TDP
DGX_H100_SYSTEM_MAX_W = 10200.0
DGX_H100_GPU_W = 8 * 700.0


def gpu_power(gpu: GpuSpec) -> GpuPower:
    """The GPU's measured power by load, or its TDP times the H200's measured ratios."""
    if gpu.power is not None:
        return gpu.power
    scale = gpu.tdp_w / H200_LIMIT_W
    return GpuPower(**{k: v * scale for k, v in H200_MEASURED_W.items()},
                    source=f"{gpu.name} datasheet TDP {gpu.tdp_w:g} W x the H200's measured load / limit ratios "
                           "(simulator/validation/data/h200_power/power.jsonl)")


def node_overhead_W(gpu: GpuSpec, gpus_per_node: int) -> float:
    """Non-GPU power of a node (CPUs, memory, NICs, fans, power-supply losses), W, held constant over the run:
    the DGX H100's maximum system power less its GPU boards, per GPU TDP watt (an upper figure: the datasheet's
    maximum)."""
    return (DGX_H100_SYSTEM_MAX_W - DGX_H100_GPU_W) / DGX_H100_GPU_W * gpus_per_node * gpu.tdp_w


def step_phases(step: StepResult) -> dict[str, float]:
    """Seconds of one step by power class, from the step's breakdown (``StepResult.parts``, which adds up to the
    step): compute and recompute are tensor-core bound; the optimizer and exposed communication HBM / copy bound
    (communication kernels move data through HBM); the host-issue gap launch bound; the pipeline bubble idle."""
    comm = sum(step.exposed_comm_s.values())
    return {"compute": step.compute_s + step.recompute_s, "memory_bound": step.optimizer_s + comm,
            "host_bound": step.host_s, "idle": step.bubble_s}


def step_energy_J(step: StepResult, power: GpuPower) -> float:
    """Board energy of one step on one GPU, J: sum over :func:`step_phases` of seconds x the phase's power."""
    watts = {"compute": power.compute_W, "memory_bound": power.memory_bound_W, "host_bound": power.host_bound_W,
             "idle": power.idle_W}
    return sum(seconds * watts[phase] for phase, seconds in step_phases(step).items())


@dataclass(frozen=True)
class Energy:
    """A run's energy in J: GPU boards busy (steps, lost work) and idle (stalls, restarts, spares), node overheads,
    network, and the facility total (x PUE)."""

    gpu_busy_J: float
    gpu_idle_J: float
    node_J: float
    network_J: float
    pue: float

    @property
    def it_J(self) -> float:
        return self.gpu_busy_J + self.gpu_idle_J + self.node_J + self.network_J

    @property
    def total_J(self) -> float:
        return self.it_J * self.pue


def run_energy(*, busy_s: float, busy_W: float, idle_W: float, gpus: int, spare_gpus: int, wall_s: float,
               node_W: float, nodes: int, network_W_per_gpu: float, pue: float) -> Energy:
    """Energy of the run: ``busy_s`` seconds of steps (the productive ones and the lost ones redone) at the steps'
    mean board power ``busy_W`` (:func:`step_energy_J` over the step time) on every GPU; the rest of the wall time
    (checkpoint stalls, restarts) and the spares' whole time at ``idle_W``; the nodes' overhead (``node_W`` each)
    and the network over the wall time; all of it times the PUE."""
    busy = busy_s * busy_W * gpus
    idle = ((wall_s - busy_s) * gpus + wall_s * spare_gpus) * idle_W
    node = node_W * nodes * wall_s
    network = network_W_per_gpu * (gpus + spare_gpus) * wall_s
    return Energy(busy, idle, node, network, pue)
