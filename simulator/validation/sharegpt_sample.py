"""The GPUStack ShareGPT rows' request lengths (simulator/validation/data/sharegpt_gpt_oss_1000.csv): 1000 (prompt,
output) pairs drawn from a public per-request ShareGPT token-count table as ``vllm bench serve`` draws its ShareGPT
requests, then scaled to the totals GPUStack's runs printed (docs/engine_kernels/gpustack_admission.md, "Lengths").

Source: Vidur's ShareGPT trace ``data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv`` (the default
trace of microsoft/vidur's ``TraceRequestLengthGeneratorConfig``; the CSV is not in vidur's tree, it is carried by
microsoft/sarathi-serve @ 72339db5b120614033b317880ad3a05a5e4c9415): 30,731 rows of ``num_prefill_tokens,
num_decode_tokens`` counted with Llama 2's tokenizer, one row per conversation turn, the prefill holding the whole
history (each turn's prefill is at least the previous turn's prefill + decode).

vLLM's sampler (vllm-project/vllm ``vllm/benchmarks/datasets.py`` @ f2e97ddaf590, ``ShareGPTDataset``): shuffles the
conversations with ``random.seed(seed)`` (``--seed`` 0 by default), takes each one's FIRST turn (prompt = first
message, output = the token count of the reply, sent as ``max_completion_tokens``) and keeps it when
``is_valid_sequence`` holds, until it has ``--num-prompts``. Here: the trace's first turns (:func:`first_turns`),
Python's ``random.Random(seed).shuffle`` over them, the same filter (:func:`is_valid_sequence`).

Scaling: the sample's Llama-2 token counts do not have GPUStack's means (its prompts and replies were tokenized with
gpt-oss's o200k_harmony and come from vLLM's ShareGPT_V3 file, not Vidur's), so each side is scaled to the
published total (:func:`scale_to_total`): the trace gives the shape (the spread of lengths), the published inputs give
the means. Nothing here reads a result of the rows.
"""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

SAMPLE = Path(__file__).parent / "data" / "sharegpt_gpt_oss_1000.csv"

#: ``is_valid_sequence`` defaults (vllm/benchmarks/datasets.py @ f2e97ddaf590): tokens
MIN_LEN, MAX_PROMPT_LEN, MAX_TOTAL_LEN = 4, 1024, 2048
#: GPUStack's printed totals over the 1000 ShareGPT prompts of its vLLM row (gpustack/gpustack docs
#: performance-lab/gpt-oss-120b/h100.md @ 72aee9dd195f; simulator/validation/data/published_engines.csv): tokens
PUBLISHED_PROMPT_TOKENS, PUBLISHED_OUTPUT_TOKENS = 215_312, 195_544
NUM_PROMPTS, SEED = 1000, 0


def is_valid_sequence(prompt_len: int, output_len: int) -> bool:
    """vLLM's ShareGPT filter: prompt and output at least 4 tokens, prompt at most 1024, prompt + output at most
    2048."""
    return (prompt_len >= MIN_LEN and output_len >= MIN_LEN and prompt_len <= MAX_PROMPT_LEN
            and prompt_len + output_len <= MAX_TOTAL_LEN)


def first_turns(rows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The rows that open a conversation: the first row, and each row whose prefill is shorter than the previous
    row's prefill + decode (a later turn's prefill holds that whole history). A first turn whose prompt is longer
    than the previous conversation's last context is taken for a continuation and lost (it biases against long
    first prompts; the trace carries no conversation id)."""
    out = rows[:1]
    for (p0, d0), (p1, d1) in zip(rows, rows[1:], strict=False):
        if p1 < p0 + d0:
            out.append((p1, d1))
    return out


def draw(turns: list[tuple[int, int]], n: int = NUM_PROMPTS, seed: int = SEED) -> list[tuple[int, int]]:
    """The first ``n`` of ``turns`` that pass :func:`is_valid_sequence`, after a shuffle seeded by ``seed`` (vLLM's
    sampler's order of work: shuffle, then filter while taking)."""
    order = list(turns)
    random.Random(seed).shuffle(order)
    kept = [t for t in order if is_valid_sequence(*t)][:n]
    if len(kept) < n:
        raise ValueError(f"only {len(kept)} of {len(turns)} turns pass the filter; {n} wanted")
    return kept


def scale_to_total(counts: list[int], total: int) -> list[int]:
    """Each count times total / sum(counts), rounded so the results sum to ``total`` exactly (largest remainders
    round up) and none is below 1 token."""
    f = total / sum(counts)
    exact = [c * f for c in counts]
    out = [max(1, math.floor(x)) for x in exact]
    short = total - sum(out)
    for i in sorted(range(len(counts)), key=lambda i: exact[i] - math.floor(exact[i]), reverse=True)[:short]:
        out[i] += 1
    return out


def derive(trace_csv: Path, seed: int = SEED) -> list[tuple[int, int, int, int]]:
    """(prompt, output) scaled to the published totals and (prompt, output) as the trace counted them, per request,
    from Vidur's trace file (module docstring); ``seed`` 0 is the shipped sample, others show what the draw moves."""
    with open(trace_csv, newline="") as f:
        rows = [(int(float(r["num_prefill_tokens"])), int(float(r["num_decode_tokens"]))) for r in csv.DictReader(f)]
    sample = draw(first_turns(rows), seed=seed)
    prompts = scale_to_total([p for p, _ in sample], PUBLISHED_PROMPT_TOKENS)
    outputs = scale_to_total([o for _, o in sample], PUBLISHED_OUTPUT_TOKENS)
    return [(p, o, rp, ro) for p, o, (rp, ro) in zip(prompts, outputs, sample, strict=True)]


def read_sample(path: Path = SAMPLE) -> list[tuple[int, ...]]:
    """The requests of a lengths file: (prompt, output) as ``serving.workload.lengths_csv`` reads them (after a
    header row and ``#`` comments), followed, where a row's comment holds them (the shipped sample), by the source's
    own counts ``# prompt,output``."""
    out = []
    for line in path.read_text().splitlines():
        data, _, note = (part.strip() for part in line.partition("#"))
        if not data or not data[0].isdigit():
            continue
        out.append(tuple(int(v) for v in data.split(",")) + tuple(int(v) for v in note.split(",") if note))
    return out
