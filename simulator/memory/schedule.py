"""Micro-batches whose activations a pipeline stage holds at its peak, per schedule.

Sources: Narayanan et al., SC'21, Sec. 2.2 (1F1B: stage i runs p - i warm-up/steady forwards before its first
backward; GPipe keeps all m micro-batches); Megatron-LM ``schedules.py`` interleaved warm-up of
2*(p - i - 1) + (v - 1)*p micro-batch chunks plus one steady-state forward, each chunk holding L/(p*v) layers,
which gives Korthikanti et al. 2023's first-stage factor p*(1 + (p-1)/(p*v)).
"""

from __future__ import annotations


def in_flight(schedule: str, pp: int, vpp: int, stage: int, microbatches: int) -> float:
    """Micro-batches of this stage's layers held at once (a float for interleaving: chunks / vpp).

    Args:
        schedule: ``1f1b`` (interleaved when vpp > 1) or ``gpipe``.
        pp: pipeline stages p; vpp: virtual stages per rank v; stage: 0-based rank i; microbatches: m.
    """
    if schedule == "gpipe":
        return float(microbatches)
    if vpp == 1:
        return float(min(pp - stage, microbatches))
    chunks = 2 * (pp - stage - 1) + (vpp - 1) * pp + 1
    return min(chunks, microbatches * vpp) / vpp
