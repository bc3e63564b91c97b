"""GPipe (Huang et al. 2019, arXiv 1811.06965; Megatron-LM ``pipeline_parallel/schedules.py``'s
forward-backward without interleaving, all forwards first): every stage runs all m forwards, then all m
backwards. Its stage ends have a closed form (:func:`simulator.schedule.fast_timeline.gpipe_ends`), and a stage
holds every micro-batch at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from simulator.caching import memo
from simulator.plan.schedules.base import Op, Schedule


@memo(maxsize=256)
def _orders(pp: int, vpp: int, m: int) -> list[list[Op]]:
    return [[("F", j, c) for j in range(m) for c in range(vpp)]
            + [("B", j, c) for j in range(m) for c in reversed(range(vpp))] for _ in range(pp)]


@dataclass(frozen=True)
class GPipe(Schedule):
    """All forwards, then all backwards (module docstring)."""

    fast: ClassVar[str | None] = "closed_form"
    searched: ClassVar[bool] = True

    def orders(self, pp: int, vpp: int, microbatches: int) -> list[list[Op]]:
        return _orders(pp, vpp, microbatches)

    def order_grid(self, pp: int, vpp: int, microbatches: int):
        import numpy as np

        total = microbatches * vpp
        q = np.arange(2 * total)
        backward = (q >= total).astype(np.int64)
        r = q - backward * total
        j, c = r // vpp, r % vpp
        return (np.broadcast_to(backward, (pp, 2 * total)), np.broadcast_to(j, (pp, 2 * total)),
                np.broadcast_to(np.where(backward == 1, vpp - 1 - c, c), (pp, 2 * total)))

    def in_flight(self, pp: int, vpp: int, stage: int, microbatches: int) -> float:
        """GPipe runs all m forwards before its first backward: m."""
        return float(microbatches)


GPIPE = GPipe("gpipe")
