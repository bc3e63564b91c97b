"""A pipeline schedule as one frozen object: everything the rest of the simulator asks a schedule for, so that no
module outside ``simulator/plan/`` tests a schedule's name (docs/architecture.md, "How to add a pipeline
schedule").

What an object provides:
- its op orders: :meth:`Schedule.orders` (per stage, forwards and whole backwards, ``(kind F/B, micro-batch, model
  chunk)``) or, for a schedule that splits the backward, :meth:`Schedule.split_orders` (per rank, F, B, W and
  overlapped F&B ops, :class:`simulator.plan.dualpipe.DualOp`);
- the micro-batches a stage holds at once (:meth:`Schedule.in_flight`; by default a walk of the orders);
- where the model's ends run (:meth:`Schedule.last_stage_rank`, :meth:`Schedule.holds_stage`), whether a rank
  holds two copies of the model (``mirrored``) or two chunks in a V (``v_shape``);
- the pipeline boundary calls per step (:meth:`Schedule.boundary_calls`) and its plan rules
  (:meth:`Schedule.check_plan`, :meth:`Schedule.check_batch`);
- which timeline evaluates it, by kind (plan imports no schedule engine; ``simulator.schedule`` maps the kinds to
  functions): ``replay`` ``"stages"`` (:func:`simulator.schedule.timeline.run_timeline` over :meth:`orders`) or
  ``"split"`` (:func:`simulator.schedule.dual_timeline.run_dual_timeline` over :meth:`split_orders`), and ``fast``
  the evaluator of ``simulate()`` and the plan search without the replay: ``"closed_form"`` (GPipe's stage ends),
  ``"steady"`` (the exact steady-state extrapolation of a periodic order, :meth:`steady_period`,
  :mod:`simulator.schedule.steady`: flat in micro-batches), ``"levels"`` (the level sweep over
  :meth:`order_grid`) or None (no exact evaluator but the replay: the search counts the plans it replays).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from simulator.plan.config import ParallelPlan, TrainingConfig
    from simulator.plan.dualpipe import DualOp

Op = tuple[str, int, int]  # (kind F/B, micro-batch, model chunk)


@dataclass(frozen=True)
class Schedule:
    """A pipeline schedule (module docstring). ``name``: its value of ``parallel.schedule``; two objects are equal
    when their class and name are (they key the caches of orders and level graphs)."""

    name: str
    replay: ClassVar[str] = "stages"
    """timeline kind: "stages" (orders of whole backwards) or "split" (F, B, W orders)"""
    fast: ClassVar[str | None] = None
    """the timeline without the replay: "closed_form", "steady", "levels" or None (replay only)"""
    one_f_one_b_form: ClassVar[bool] = False
    """its orders without interleaving are 1F1B's (p - i - 1 warm-up forwards, F B pairs, the backwards left):
    :mod:`simulator.schedule.one_f_one_b_form` times them in closed form around the steady state"""
    interleaves: ClassVar[bool] = False
    """runs virtual stages (vpp > 1) when the plan asks for them"""
    v_shape: ClassVar[bool] = False
    """two chunks per rank in a V: the model's head on rank 0, both directions cross every boundary"""
    mirrored: ClassVar[bool] = False
    """two copies of the model: rank i also holds stage pp-1-i of the second copy"""
    searched: ClassVar[bool] = False
    """in the plan search's default space (``search.schedule`` null)"""

    @property
    def splits_backward(self) -> bool:
        """Whether its backward is split into B and W (the step's summary names such a schedule)."""
        return self.replay == "split"

    def orders(self, pp: int, vpp: int, microbatches: int) -> list[list[Op]]:
        """The op order of every stage (replay kind "stages"). Callers must not modify the lists."""
        raise TypeError(f"schedule {self.name} splits the backward: its orders are split_orders (internal error)")

    def split_orders(self, pp: int, microbatches: int) -> tuple[tuple[DualOp, ...], ...]:
        """The op order of every rank (replay kind "split")."""
        raise TypeError(f"schedule {self.name} runs whole backwards: its orders are orders() (internal error)")

    def order_grid(self, pp: int, vpp: int, microbatches: int):
        """:meth:`orders` as three ``(pp, 2 m vpp)`` integer arrays: ``backward`` (0/1), micro-batch and model
        chunk of each stage's q-th op (the plan search's level timeline reads them). Built from the orders; a
        schedule may give a vectorised form (1F1B, GPipe)."""
        import numpy as np

        rows = np.array([[(kind == "B", j, c) for kind, j, c in order]
                         for order in self.orders(pp, vpp, microbatches)], dtype=np.int64)
        return rows[:, :, 0], rows[:, :, 1], rows[:, :, 2]

    def steady_period(self, pp: int, vpp: int) -> int:
        """Micro-batches per period of the steady state (``fast`` "steady"): on every stage the op 2 vpp S
        positions later is the same kind and chunk of the micro-batch S later, with the same dependencies
        shifted (:mod:`simulator.schedule.steady` checks the shift on the graph and falls back to the level sweep
        where it does not hold)."""
        raise TypeError(f"schedule {self.name} has no steady period (internal error)")

    def chunks_per_rank(self, vpp: int) -> int:
        """Model chunks a rank runs (each 1/this of its layers): 2 in a V, else vpp."""
        return 2 if self.v_shape else vpp

    def in_flight(self, pp: int, vpp: int, stage: int, microbatches: int) -> float:
        """Micro-batches of this stage's layers held at once: the peak over the stage's op order of forwards run
        minus backwards done, in chunks (an overlapped F&B pair counts its forward before its backward, a split B
        frees its chunk, a W frees nothing), divided by :meth:`chunks_per_rank`. Schedules with a closed form
        override it; :func:`simulator.plan.pipeline.in_flight_walk` keeps this walk as their reference."""
        if self.splits_backward:
            kinds = [op.kind for op in self.split_orders(pp, microbatches)[stage]]
        else:
            kinds = [kind for kind, _, _ in self.orders(pp, vpp, microbatches)[stage]]
        held = peak = 0
        for kind in kinds:
            if kind in ("F", "FB"):
                held += 1
                peak = max(peak, held)
            if kind in ("B", "FB"):
                held -= 1
        return peak / self.chunks_per_rank(vpp)

    def last_stage_rank(self, pp: int) -> int:
        """The PP rank that runs the model's last stage (head, loss, MTP modules): pp-1, or rank 0 in a V."""
        return 0 if self.v_shape else pp - 1

    def holds_stage(self, rank: int, first: bool, pp: int) -> bool:
        """Whether PP rank ``rank`` runs the model's first stage (``first``) or its last: rank 0 and
        :meth:`last_stage_rank`; with a mirrored copy also their mirrors (rank pp-1-i runs the copy's stage i)."""
        stage = 0 if first else self.last_stage_rank(pp)
        return rank == stage or (self.mirrored and rank == pp - 1 - stage)

    def boundary_calls(self, stage: int, pp: int, vpp: int, microbatches: int, backward: bool) -> int:
        """Calls per step of one pipeline boundary op (a sendrecv of activations, or of their gradients when
        ``backward``) on ``stage``: every chunk of every micro-batch but the last stage's activations and the first
        stage's gradients, which leave no rank. A V or a mirrored copy sends both ways on every inner boundary:
        m (V) or m/2 (each copy) per direction."""
        m = microbatches
        if self.v_shape or self.mirrored:
            per_phase = m // 2 if self.mirrored else m
            return per_phase * ((stage < pp - 1) + (stage > 0))
        return m * vpp - (m if stage == (0 if backward else pp - 1) else 0)

    def check_plan(self, p: ParallelPlan, t: TrainingConfig) -> None:
        """The schedule's own plan rules, raising a located :class:`~simulator.errors.UserError` (none here)."""
        del p, t

    def check_batch(self, p: ParallelPlan, t: TrainingConfig, dp: int, micro: int) -> None:
        """The schedule's rules on the micro-batch count ``micro`` per step (none here)."""
        del p, t, dp, micro
