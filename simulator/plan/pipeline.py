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

Op = tuple[str, int, int]  # (kind F/B, micro-batch, model chunk)


@lru_cache(maxsize=256)
def stage_orders(schedule: str, pp: int, vpp: int, microbatches: int) -> list[list[Op]]:
    """The op order of every stage for ``schedule`` (``gpipe`` or ``1f1b``; interleaved when vpp > 1).

    Cached (sweeps ask for the same orders again and again): callers must not modify the lists."""
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
    """:func:`stage_orders` as numpy arrays per stage, ``(backward, micro-batch, chunk)`` (backward 0/1), built
    without a Python loop over ops (the plan search's level timeline reads them; a test keeps the two equal)."""
    import numpy as np

    m, out = microbatches, []
    for i in range(pp):
        if schedule == "gpipe":
            j = np.repeat(np.arange(m), vpp)
            c = np.tile(np.arange(vpp), m)
            out.append((np.repeat([0, 1], m * vpp), np.concatenate([j, j]), np.concatenate([c, vpp - 1 - c])))
            continue
        total = m * vpp
        warm = min(pp - i - 1, m) if vpp == 1 else min((pp - i - 1) * 2 + (vpp - 1) * pp, total)
        steady = total - warm
        k_f = np.concatenate([np.arange(warm), np.ravel(np.column_stack([warm + np.arange(steady),
                                                                         np.full(steady, -1)])), np.full(warm, -1)])
        k_b = np.concatenate([np.full(warm, -1), np.ravel(np.column_stack([np.full(steady, -1),
                                                                           np.arange(steady)])),
                              np.arange(steady, total)])
        backward = (k_b >= 0).astype(np.int64)
        k = np.where(backward == 1, k_b, k_f)
        group, within = np.divmod(k, pp * vpp)
        chunk = (k % (pp * vpp)) // pp
        out.append((backward, group * pp + within % pp, np.where(backward == 1, vpp - 1 - chunk, chunk)))
    return out


def in_flight(schedule: str, pp: int, vpp: int, stage: int, microbatches: int) -> float:
    """Micro-batches of this stage's layers held at once: the peak, over the stage's op order, of forwards run
    minus backwards done, in model chunks, divided by vpp (a chunk holds 1/vpp of the stage's layers).

    In closed form from the orders above (a test checks it against :func:`in_flight_walk` on every small
    schedule): GPipe runs all m forwards first, so m; 1F1B and interleaved 1F1B run their warm-up forwards
    (min(w, m v) chunks, w = p - i - 1 or 2(p - i - 1) + (v - 1)p) and then one more forward before the first
    backward when any is left, so min(w + 1, m v) / v. This is min(p - i, m) without interleaving and Korthikanti
    et al. 2023's first-stage factor p(1 + (p - 1)/(p v)) with it (Narayanan et al., SC'21, Sec. 2.2).
    """
    if schedule == "gpipe":
        return float(microbatches)
    warm = pp - stage - 1 if vpp == 1 else (pp - stage - 1) * 2 + (vpp - 1) * pp
    return min(warm + 1, microbatches * vpp) / vpp


def in_flight_walk(schedule: str, pp: int, vpp: int, stage: int, microbatches: int) -> float:
    """:func:`in_flight` by walking the stage's op order (the reference its closed form is tested against)."""
    held = peak = 0
    for kind, _, _ in stage_orders(schedule, pp, vpp, microbatches)[stage]:
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    return peak / vpp
