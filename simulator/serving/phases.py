"""A request's phases priced by the step model: the prefill of a batch of prompts (in chunks of
``max_batched_tokens`` when set), one decode step (pipeline micro-batches in flight, or one speculative iteration)
and the mean decode step over the ``output_len`` steps; seconds (docs/serving/outputs.md)."""

from __future__ import annotations

import math

import numpy as np

from simulator.arrays import distinct
from simulator.plan import Batch, ResolvedPlan
from simulator.serving.speculative import speculative_decode_time
from simulator.serving.step import StepContext, StepTime, captured, step_time

#: decode steps sampled for the mean over output_len (the step is linear in the context between regime changes)
MEAN_SAMPLES = 9


def prefill_time(ctx: StepContext, rp: ResolvedPlan, seqs: int) -> tuple[StepTime, int]:
    """Prefill of ``seqs`` prompts of ``input_len`` (chunks of ``max_batched_tokens`` tokens when set): the sum of
    its steps, their breakdowns summed; returns it and the prompt tokens."""
    s = ctx.serving
    budget = s.max_batched_tokens or seqs * s.input_len
    chunk = min(s.input_len, budget)
    per_step = max(1, min(seqs, budget // chunk))
    steps: list[StepTime] = []
    done = 0
    while done < seqs:
        n = min(per_step, seqs - done)
        for past in range(0, s.input_len, chunk):
            new = min(chunk, s.input_len - past)
            steps.append(step_time(ctx, rp, Batch(n, new, past), phase="prefill", graphs=False))
        done += n
    return _sum_steps(steps), seqs * s.input_len


def _sum_steps(steps: list[StepTime]) -> StepTime:
    if len(steps) == 1:
        return steps[0]
    keys = steps[0].breakdown_s
    return StepTime(step_s=sum(t.step_s for t in steps), gpu_s=sum(t.gpu_s for t in steps),
                    kernels=sum(t.kernels for t in steps),
                    breakdown_s={k: sum(t.breakdown_s[k] for t in steps) for k in keys},
                    comm=steps[0].comm)


def decode_time(ctx: StepContext, rp: ResolvedPlan, seqs: int, past: int) -> StepTime:
    """One decode step of ``seqs`` sequences with ``past`` cached tokens each; with pipeline parallelism the
    sequences form ``min(pp, seqs)`` micro-batches in flight together (vLLM's virtual engines). With
    ``serving.speculative`` one iteration (drafts and verify) over its expected tokens (serving/speculative.py)."""
    if ctx.serving.speculative is not None:
        return speculative_decode_time(ctx, rp, seqs, past)
    m = min(rp.parallel.pp, seqs)
    per = math.ceil(seqs / m)
    return step_time(ctx, rp, Batch(per, 1, past), phase="decode", graphs=captured(ctx.serving, per), microbatches=m)


def mean_decode_s(ctx: StepContext, rp: ResolvedPlan, seqs: int) -> float:
    """Mean decode step over contexts input_len .. input_len + output_len - 1 (trapezoid over sampled steps)."""
    s = ctx.serving
    if s.output_len == 1:
        return decode_time(ctx, rp, seqs, s.input_len).step_s
    points = distinct(np.linspace(0, s.output_len - 1, min(MEAN_SAMPLES, s.output_len)).round().astype(int))
    times = np.array([decode_time(ctx, rp, seqs, s.input_len + int(i)).step_s for i in points])
    return float(np.trapezoid(times, points) / (points[-1] - points[0]))
