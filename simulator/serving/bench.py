"""``simulator serve --bench``: a whole request stream through the serving loop, reported as the engines' benchmark
scripts report it (docs/serving/bench.md).

The stream (``serving.workload``, simulator/implementation/workload.py) is drawn with numpy's ``Generator`` seeded
by ``workload.seed``: first the arrival gaps, then the input lengths, then the output lengths. Request ``i`` of the
system goes to replica ``i mod replicas`` (a round-robin router); replica 0's share is simulated and every replica
is taken to serve as it does.

Metrics (vLLM ``vllm/benchmarks/serve.py`` ``calculate_metrics``; SGLang ``python/sglang/bench_serving.py``
``calculate_metrics``; commits in docs/serving/bench.md), over every request, ramp-up and drain included:

- duration: last completion, from the benchmark's start (t = 0; the first request leaves after one gap);
- request_throughput = completed requests / duration; output_tokens_per_s = output tokens / duration;
- TTFT = first token - arrival; e2e = last token - arrival;
- TPOT = (e2e - TTFT) / (output tokens - 1), per request, only requests with more than one output token;
- ITL: every gap between consecutive tokens of a request, all requests pooled.

Each is given as mean, p50, p90 and p99 (``numpy.percentile``, linear interpolation), in seconds.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from simulator.errors import UserError
from simulator.implementation.workload import MAX_CSV_BYTES, MAX_TOKENS, LengthDistribution, Workload
from simulator.serving.loop import LoopCosts, LoopLimits, run_loop

QUANTILES = (50, 90, 99)
KEY = "serving.workload"


def _csv_rows(path: Path, key: str, columns: int) -> list[tuple[int, list[float]]]:
    """(line, values) of the CSV's data rows: ``columns`` numbers each; a first row that is not numbers is a header;
    blank lines and ``#`` comments are skipped. A bad row is a UserError at that line of the CSV."""
    if not path.is_file():
        raise UserError(f"{path}: no such file", key_path=key)
    if path.stat().st_size > MAX_CSV_BYTES:
        raise UserError(f"{path} is {path.stat().st_size:,} bytes, more than {MAX_CSV_BYTES:,}", key_path=key)
    rows, header = [], True
    for line, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
        text = text.split("#", 1)[0].strip()
        if not text:
            continue
        cells = [c.strip() for c in text.split(",")]
        first, header = header, False
        try:
            values = [float(c) for c in cells]
        except ValueError:
            if first:
                continue  # a header
            raise UserError(f"row {text!r} is not {columns} number(s)", file=str(path), line=line,
                            key_path=key) from None
        if len(values) != columns or not all(math.isfinite(v) and v >= 0 for v in values):
            raise UserError(f"row {text!r} must be {columns} finite number(s) at least 0", file=str(path), line=line,
                            key_path=key)
        rows.append((line, values))
    if not rows:
        raise UserError(f"{path} has no data rows", key_path=key)
    return rows


def arrivals(w: Workload, n: int, rng: np.random.Generator, base: Path) -> np.ndarray:
    """Arrival times (s after the benchmark starts) of ``n`` requests to the system, as vLLM's ``get_request`` sends
    them: request i after the sum of the first i + 1 gaps, the sums scaled so the last is exactly n / rate (the
    benchmark closes the 1-2% gap a random sum leaves). A CSV gives its own times (and count)."""
    a = w.arrival
    if a.process == "csv":
        rows = _csv_rows(base / a.path, f"{KEY}.arrival.path", 1)
        times = np.array([v[0] for _, v in rows])
        for (line, _), prev, t in zip(rows[1:], times, times[1:], strict=False):
            if t < prev:
                raise UserError(f"arrival time {t:g} s comes before the previous one ({prev:g} s): times must not "
                                "decrease", file=str(base / a.path), line=line, key_path=f"{KEY}.arrival.path")
        return times
    if a.rate is None:
        return np.zeros(n)
    if a.process == "constant":
        gaps = np.full(n, 1.0 / a.rate)
    elif a.process == "poisson":
        gaps = rng.exponential(1.0 / a.rate, n)
    else:
        gaps = rng.gamma(a.shape, 1.0 / (a.rate * a.shape), n)
    times = np.cumsum(gaps)
    return times * (n / a.rate / times[-1])


def lengths(d: LengthDistribution | None, default: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` token counts of one side, rounded and clipped to [1, MAX_TOKENS]."""
    if d is None:
        return np.full(n, default, dtype=np.int64)
    if d.distribution == "fixed":
        return np.full(n, d.value, dtype=np.int64)
    if d.distribution == "uniform":
        return rng.integers(d.low, d.high + 1, n, dtype=np.int64)
    draws = rng.normal(d.mean, d.std, n) if d.distribution == "normal" else rng.lognormal(math.log(d.median), d.sigma, n)
    return np.clip(np.rint(draws), 1, MAX_TOKENS).astype(np.int64)


def workload_stream(w: Workload | None, input_len: int, output_len: int, n: int, block: int, base: Path
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The system's stream: arrival times (s), input and output tokens, and prompt tokens cached (a prefix-cache hit
    covers whole pages of ``block`` tokens, and at least one prompt token is computed, as vLLM's prefix cache does).
    Shared-prefix groups: request i (arrival order) is in group i mod groups; requests i >= groups find their
    group's prefix cached. Its pages are counted for every request holding it (vLLM and SGLang share them: the
    cache's capacity is understated when many requests of a group run together)."""
    w = w or Workload()
    rng = np.random.default_rng(w.seed)
    times = arrivals(w, n, rng, base)
    n = len(times)
    if w.lengths_csv is not None:
        rows = _csv_rows(base / w.lengths_csv, f"{KEY}.lengths_csv", 2)
        for line, (i, o) in rows:
            if i < 1 or o < 1 or i != int(i) or o != int(o) or max(i, o) > MAX_TOKENS:
                raise UserError(f"input {i:g} and output {o:g} must be whole token counts from 1 to {MAX_TOKENS:,}",
                                file=str(base / w.lengths_csv), line=line, key_path=f"{KEY}.lengths_csv")
        table = np.array([v for _, v in rows], dtype=np.int64)[np.arange(n) % len(rows)]
        ins, outs = table[:, 0], table[:, 1]
    else:
        ins, outs = lengths(w.input, input_len, n, rng), lengths(w.output, output_len, n, rng)
    hits = np.floor(w.prefix_hit_rate * ins / block) * block
    if w.shared_prefix is not None:  # the group's prefix before each prompt, cached after the group's first request
        g = w.shared_prefix
        ins = ins + g.prefix_len
        hits = np.where(np.arange(n) >= g.groups, np.maximum(hits, g.prefix_len // block * block), hits)
    cached = np.minimum(hits, (ins - 1) // block * block)
    return times, ins, outs, cached.astype(np.int64)


def _stats(values: np.ndarray, counts: np.ndarray | None = None) -> dict:
    """Mean and percentiles of ``values`` repeated ``counts`` times (all None when empty): np.percentile's linear
    interpolation on the expanded series, computed without expanding it."""
    if counts is None:
        counts = np.ones(len(values), dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return {"mean": None, **{f"p{q}": None for q in QUANTILES}}
    order = np.argsort(values, kind="stable")
    v, ends = values[order], np.cumsum(counts[order])

    def at(i: int) -> float:
        return float(v[np.searchsorted(ends, i, side="right")])

    out = {"mean": float((values * counts).sum() / total)}
    for q in QUANTILES:
        pos = q / 100 * (total - 1)
        lo = math.floor(pos)
        out[f"p{q}"] = at(lo) + (pos - lo) * (at(min(lo + 1, total - 1)) - at(lo))
    return out


def bench(w: Workload | None, *, input_len: int, output_len: int, num_requests: int, replicas: int, base: Path,
          costs: LoopCosts, limits: LoopLimits) -> dict:
    """The ``bench`` object of ``simulator serve --bench --json`` (module docstring)."""
    times, ins, outs, cached = workload_stream(w, input_len, output_len, num_requests, limits.block_tokens, base)
    share = np.arange(0, len(times), replicas)
    order = share[np.argsort(times[share], kind="stable")]
    try:
        run = run_loop(times[order], ins[order], outs[order], costs, limits, cached=cached[order])
    except ValueError as exc:  # a request the engine can never admit
        raise UserError(f"a request of the workload cannot be served: {exc}", key_path=KEY) from None
    duration = float(run.finish_s.max())  # the clock starts with the benchmark, at t = 0
    first, fin, arr = run.first_token_s, run.finish_s, run.arrival_s
    many = run.output_len > 1
    return {"requests": int(len(order)) * replicas, "duration_s": duration,
            "request_throughput": replicas * len(order) / duration,
            "output_tokens_per_s": replicas * int(run.output_len.sum()) / duration,
            "ttft_s": _stats(first - arr), "tpot_s": _stats((fin - first)[many] / (run.output_len[many] - 1)),
            "itl_s": _stats(*run.itl_s), "e2e_s": _stats(fin - arr)}
