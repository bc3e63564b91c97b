"""The device peak of training plans that differ only in micro-batch size and sharding, from one report (search).

Each item of a stage declares how its bytes grow with the micro-batch size b (``MemoryItem.scaling``): ``fixed``
(model states, buffers sized by parameters), ``micro_batch`` (proportional to b) or ``in_flight`` (proportional to b
and to the micro-batches in flight, :func:`simulator.plan.pipeline.in_flight`, which depends on b through the
micro-batch count m = global batch / (b dp)). So with the sums of a stage's items by scaling in a report of the plan
at b0 (F, P and Q, with f0 micro-batches in flight), the stage's peak at b, m is

    peak_s(b, m) = F_s + (b / b0) (P_s + Q_s in_flight_s(m) / f0_s)

the same items in another order of addition (equal to :func:`simulator.memory.estimate.estimate_memory` to about
1e-15 relative). The sharding (distributed optimizer, ZeRO stage) changes only the fixed items (the states'
divisors, the DDP buckets, gathered layers and gradients, autocast copies; the activations follow the precision,
framework and attention, not the sharding), so a plan of another sharding takes its own F_s
(:func:`simulator.memory.estimate.fixed_bytes`) with the same P and Q, and its own NCCL bytes (an all-reduce of
the gradients across NVLink domains picks NVLS-tree, a reduce-scatter does not: :mod:`simulator.memory.nccl`). A hypothesis test
(tests/search/test_memory_scaling.py) checks 1e-9 on drawn plans. A report with an undeclared item, gradients
freed between steps (their peak is not a sum, and depends on m = 1) or inference memory gives no coefficients.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.memory.items import MemoryReport
from simulator.plan.pipeline import in_flight


@dataclass(frozen=True, slots=True)
class PeakOnly:
    """The two numbers of a :class:`~simulator.memory.items.MemoryReport` a search row reads."""

    peak_bytes: float
    device_peak_bytes: float


@dataclass(frozen=True, slots=True)
class PeakByMicroBatch:
    """Coefficients of :func:`peak_by_micro_batch` (bytes per GPU; one entry per reported stage)."""

    b0: int
    schedule: str
    pp: int
    vpp: int
    stages: tuple[int, ...]
    fixed: tuple[float, ...]
    per_micro_batch: tuple[float, ...]
    """P_s: the ``micro_batch`` items at b0."""
    per_in_flight: tuple[float, ...]
    """Q_s / f0_s: the ``in_flight`` items at b0 per micro-batch in flight."""
    runtime_bytes: float
    nccl: tuple[float, ...] = ()
    """NCCL's device bytes per stage (they depend on the plan's groups and, through NVLS-tree, on whether its
    gradients are all-reduced; not on its micro-batch)."""

    def peak(self, micro_batch: int, num_microbatches: int, fixed: tuple[float, ...] | None = None,
             nccl: tuple[float, ...] | None = None) -> PeakOnly:
        """The tensors' peak (largest stage) and the device peak of the plan at ``micro_batch``; ``fixed`` and
        ``nccl``: its F_s (:func:`simulator.memory.estimate.fixed_bytes`) and NCCL bytes per stage when its sharding
        differs from the report's."""
        peaks = self.stage_peaks(micro_batch, num_microbatches, fixed)
        device = max(p + n for p, n in zip(peaks, self.nccl if nccl is None else nccl, strict=True))
        return PeakOnly(max(peaks), device + self.runtime_bytes)


    def stage_peaks(self, micro_batch: int, num_microbatches: int, fixed: tuple[float, ...] | None = None
                    ) -> list[float]:
        """Each reported stage's tensor peak at ``micro_batch`` (:meth:`peak` takes their largest)."""
        r = micro_batch / self.b0
        return [f + r * (p + q * in_flight(self.schedule, self.pp, self.vpp, s, num_microbatches))
                for s, f, p, q in zip(self.stages, self.fixed if fixed is None else fixed,
                                      self.per_micro_batch, self.per_in_flight, strict=True)]


def peak_by_micro_batch(report: MemoryReport, micro_batch: int, num_microbatches: int, schedule: str, pp: int,
                        vpp: int) -> PeakByMicroBatch | None:
    """Coefficients of the device peak in the micro-batch size from ``report`` of a training plan at
    ``micro_batch`` (module docstring), or None where the peak is not such a sum."""
    fixed, per_b, per_flight = [], [], []
    for st in report.stages:
        if st.gradients_freed:
            return None
        sums = {"fixed": 0.0, "micro_batch": 0.0, "in_flight": 0.0}
        for item in st.items:
            if item.scaling is None:
                return None
            sums[item.scaling] += item.bytes
        flight = in_flight(schedule, pp, vpp, st.stage, num_microbatches)
        fixed.append(sums["fixed"])
        per_b.append(sums["micro_batch"])
        per_flight.append(sums["in_flight"] / flight)
    return PeakByMicroBatch(micro_batch, schedule, pp, vpp, tuple(s.stage for s in report.stages), tuple(fixed),
                            tuple(per_b), tuple(per_flight), report.runtime_bytes,
                            tuple(s.nccl_bytes for s in report.stages))
