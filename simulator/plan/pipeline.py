"""Pipeline schedules as per-stage op orders: the one home of what each schedule runs in which order. The step
engine replays them as a timeline (:mod:`simulator.schedule.timeline`) and memory derives the micro-batches a stage
holds at once from them (:func:`in_flight`).

Orders (Megatron-LM ``pipeline_parallel/schedules.py``; Narayanan et al., SC'21, Sec. 2.2):
- GPipe: all forwards, then all backwards.
- 1F1B: stage i runs min(p - i - 1, m) warm-up forwards, then alternates one forward and one backward, then
  drains the remaining backwards.
- Interleaved 1F1B (vpp = v > 1): micro-batch chunks in groups of p; warm-up of (p - i - 1) * 2 + (v - 1) * p
  chunks; forward chunk k runs model chunk (k // p) % v, backward chunk k runs model chunk v - 1 - (k // p) % v.
"""

from __future__ import annotations

from functools import lru_cache

from simulator.plan.dualpipe import DUAL_SCHEDULES, dual_in_flight
from simulator.plan.zero_bubble import SPLIT_SCHEDULES, V_SCHEDULES, split_orders, zb_in_flight

Op = tuple[str, int, int]  # (kind F/B, micro-batch, model chunk)


@lru_cache(maxsize=256)
def stage_orders(schedule: str, pp: int, vpp: int, microbatches: int) -> list[list[Op]]:
    """The op order of every stage for ``schedule`` (``gpipe`` or ``1f1b``; interleaved when vpp > 1).

    Cached (sweeps ask for the same orders again and again): callers must not modify the lists. The schedules that
    split the backward (bidirectional and zero-bubble) have orders of their own
    (:func:`simulator.plan.zero_bubble.split_orders`)."""
    if schedule in SPLIT_SCHEDULES:
        raise ValueError(f"{schedule} orders are simulator.plan.zero_bubble.split_orders (internal error)")
    m = microbatches
    if schedule == "gpipe":
        return [[("F", j, c) for j in range(m) for c in range(vpp)]
                + [("B", j, c) for j in range(m) for c in reversed(range(vpp))] for _ in range(pp)]
    if vpp == 1:
        orders = []
        for i in range(pp):
            warm = min(pp - i - 1, m)
            order: list[Op] = [("F", j, 0) for j in range(warm)]
            for j in range(m - warm):
                order += [("F", warm + j, 0), ("B", j, 0)]
            order += [("B", j, 0) for j in range(m - warm, m)]
            orders.append(order)
        return orders
    return [_interleaved(i, pp, vpp, m) for i in range(pp)]


def _chunk(k: int, pp: int, vpp: int, forward: bool) -> tuple[int, int]:
    """(micro-batch, model chunk) of the k-th forward or backward chunk (Megatron's interleaved indexing)."""
    group, within = divmod(k, pp * vpp)
    c = (k % (pp * vpp)) // pp
    j = group * pp + within % pp
    return j, c if forward else vpp - 1 - c


def _interleaved(i: int, pp: int, vpp: int, m: int) -> list[Op]:
    total = m * vpp
    warm = min((pp - i - 1) * 2 + (vpp - 1) * pp, total)
    order: list[Op] = [("F", *_chunk(k, pp, vpp, True)) for k in range(warm)]
    for k in range(total - warm):
        order += [("F", *_chunk(warm + k, pp, vpp, True)), ("B", *_chunk(k, pp, vpp, False))]
    order += [("B", *_chunk(k, pp, vpp, False)) for k in range(total - warm, total)]
    return order


def stage_order_arrays(schedule: str, pp: int, vpp: int, microbatches: int) -> list[tuple]:
    """:func:`stage_orders` as numpy arrays per stage, ``(backward, micro-batch, chunk)`` (backward 0/1): the rows
    of :func:`stage_order_grid` (a test keeps them equal to the orders)."""
    backward, j, c = stage_order_grid(schedule, pp, vpp, microbatches)
    return [(backward[i], j[i], c[i]) for i in range(pp)]


def stage_order_grid(schedule: str, pp: int, vpp: int, microbatches: int):
    """:func:`stage_orders` as three ``(pp, 2 m vpp)`` integer arrays (every stage runs m vpp forwards and as many
    backwards): ``backward`` (0/1), micro-batch and model chunk of each stage's q-th op, built without a Python
    loop over ops or stages (the plan search's level timeline reads them). In the 1F1B orders stage i runs its
    w_i warm-up forwards (k = q), then alternates forward k = w_i + (q - w_i)/2 and backward k = (q - w_i - 1)/2,
    then drains the backwards k = q - w_i - (total - w_i); k is the forward or backward chunk counter of
    :func:`_chunk`."""
    import numpy as np

    m, total = microbatches, microbatches * vpp
    q = np.arange(2 * total)
    if schedule == "gpipe":
        backward = (q >= total).astype(np.int64)
        r = q - backward * total
        j, c = r // vpp, r % vpp
        return (np.broadcast_to(backward, (pp, 2 * total)), np.broadcast_to(j, (pp, 2 * total)),
                np.broadcast_to(np.where(backward == 1, vpp - 1 - c, c), (pp, 2 * total)))
    rest = pp - np.arange(pp)[:, None] - 1
    warm = np.minimum(rest, m) if vpp == 1 else np.minimum(rest * 2 + (vpp - 1) * pp, total)
    steady = total - warm
    t = q - warm                                             # (pp, 2 total): position after the warm-up
    in_steady = (t >= 0) & (t < 2 * steady)
    backward = np.where(t < 0, 0, np.where(in_steady, t % 2, 1))
    k = np.where(t < 0, q, np.where(in_steady, np.where(backward == 1, (t - 1) // 2, warm + t // 2), t - steady))
    if vpp == 1:                    # one chunk: the counter is the micro-batch
        return backward, k, np.zeros_like(k)
    group, within = np.divmod(k, pp * vpp)
    chunk = (k % (pp * vpp)) // pp
    return backward, group * pp + within % pp, np.where(backward == 1, vpp - 1 - chunk, chunk)


def in_flight(schedule: str, pp: int, vpp: int, stage: int, microbatches: int) -> float:
    """Micro-batches of this stage's layers held at once: the peak, over the stage's op order, of forwards run
    minus backwards done, in model chunks, divided by vpp (a chunk holds 1/vpp of the stage's layers).

    In closed form from the orders above (a test checks it against :func:`in_flight_walk` on every small
    schedule): GPipe runs all m forwards first, so m; 1F1B and interleaved 1F1B run their warm-up forwards
    (min(w, m v) chunks, w = p - i - 1 or 2(p - i - 1) + (v - 1)p) and then one more forward before the first
    backward when any is left, so min(w + 1, m v) / v. This is min(p - i, m) without interleaving and Korthikanti
    et al. 2023's first-stage factor p(1 + (p - 1)/(p v)) with it (Narayanan et al., SC'21, Sec. 2.2).
    DualPipe and DualPipeV: :func:`simulator.plan.dualpipe.dual_in_flight`; ZB-H1 and ZB-V:
    :func:`simulator.plan.zero_bubble.zb_in_flight`.
    """
    if schedule in DUAL_SCHEDULES:
        return dual_in_flight(schedule, pp, stage, microbatches)
    if schedule in SPLIT_SCHEDULES:
        return zb_in_flight(schedule, pp, stage, microbatches)
    if schedule == "gpipe":
        return float(microbatches)
    warm = pp - stage - 1 if vpp == 1 else (pp - stage - 1) * 2 + (vpp - 1) * pp
    return min(warm + 1, microbatches * vpp) / vpp


def in_flight_walk(schedule: str, pp: int, vpp: int, stage: int, microbatches: int) -> float:
    """:func:`in_flight` by walking the stage's op order (the reference its closed form is tested against), for
    every schedule: forwards run minus backwards done, in chunks; an overlapped F&B pair counts its forward before
    its backward and a split backward frees its chunk (a W frees nothing). A chunk is 1/vpp of the stage's layers,
    half of them with the V schedules (DualPipeV, ZB-V)."""
    if schedule in SPLIT_SCHEDULES:
        kinds = [op.kind for op in split_orders(schedule, pp, microbatches)[stage]]
        per_rank = 2 if schedule in V_SCHEDULES else 1
    else:
        kinds = [kind for kind, _, _ in stage_orders(schedule, pp, vpp, microbatches)[stage]]
        per_rank = vpp
    held = peak = 0
    for kind in kinds:
        if kind in ("F", "FB"):
            held += 1
            peak = max(peak, held)
        if kind in ("B", "FB"):
            held -= 1
    return peak / per_rank
