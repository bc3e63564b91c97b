"""Interleaved 1F1B (vpp = v > 1 virtual stages per rank; Narayanan et al., SC'21, Sec. 2.2; Megatron-LM
``pipeline_parallel/schedules.py``): the orders the 1F1B object (:mod:`simulator.plan.schedules.one_f_one_b`,
``interleaves``) runs when the plan asks for virtual stages, and the vectorised grid of both forms.

Micro-batch chunks in groups of p; stage i runs a warm-up of (p - i - 1) * 2 + (v - 1) * p chunks; forward chunk
k runs model chunk (k // p) % v, backward chunk k runs model chunk v - 1 - (k // p) % v. Megatron requires the
micro-batch count to be a multiple of p (:func:`check_interleaved_batch`).
"""

from __future__ import annotations

from simulator.errors import UserError
from simulator.plan.schedules.base import Op


def _chunk(k: int, pp: int, vpp: int, forward: bool) -> tuple[int, int]:
    """(micro-batch, model chunk) of the k-th forward or backward chunk (Megatron's interleaved indexing)."""
    group, within = divmod(k, pp * vpp)
    c = (k % (pp * vpp)) // pp
    j = group * pp + within % pp
    return j, c if forward else vpp - 1 - c


def interleaved_order(i: int, pp: int, vpp: int, m: int) -> list[Op]:
    """Stage ``i``'s order (module docstring)."""
    total = m * vpp
    warm = min((pp - i - 1) * 2 + (vpp - 1) * pp, total)
    order: list[Op] = [("F", *_chunk(k, pp, vpp, True)) for k in range(warm)]
    for k in range(total - warm):
        order += [("F", *_chunk(warm + k, pp, vpp, True)), ("B", *_chunk(k, pp, vpp, False))]
    order += [("B", *_chunk(k, pp, vpp, False)) for k in range(total - warm, total)]
    return order


def one_f_one_b_grid(pp: int, vpp: int, microbatches: int):
    """The 1F1B orders, interleaved or not, as three ``(pp, 2 m vpp)`` integer arrays (``backward`` 0/1,
    micro-batch, model chunk of each stage's q-th op), built without a Python loop over ops or stages. Stage i runs
    its w_i warm-up forwards (k = q), then alternates forward k = w_i + (q - w_i)/2 and backward
    k = (q - w_i - 1)/2, then drains the backwards k = q - w_i - (total - w_i); k is the forward or backward chunk
    counter of :func:`_chunk`."""
    import numpy as np

    m, total = microbatches, microbatches * vpp
    q = np.arange(2 * total)
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


def check_interleaved_batch(pp: int, vpp: int, global_batch: int, micro_batch: int, dp: int, micro: int) -> None:
    """Megatron's rule (megatron/core/pipeline_parallel/schedules.py: "number of microbatches is not divisible by
    pipeline-model-parallel-size when using interleaved schedule"): the micro-batches run in groups of pp."""
    if vpp > 1 and micro % pp:
        raise UserError(f"the interleaved schedule (vpp {vpp}) needs the micro-batch count global_batch "
                        f"({global_batch}) / (micro_batch ({micro_batch}) * dp ({dp})) = {micro} to be a multiple "
                        f"of pp ({pp})", key_path="training.global_batch")
