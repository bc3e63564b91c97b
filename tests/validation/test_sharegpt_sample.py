"""The GPUStack ShareGPT rows' request lengths (simulator/validation/data/sharegpt_gpt_oss_1000.csv; derivation in
simulator/validation/sharegpt_sample.py): vLLM's ShareGPT filter holds on the source's counts, the scaled lengths are
the source's counts scaled to GPUStack's published totals, and ``serving.workload.lengths_csv`` reads them as they
stand. Checked by hand, not against the model."""

from pathlib import Path

import pytest

from simulator.implementation.workload import Workload
from simulator.serving.bench import workload_stream
from simulator.validation.sharegpt_sample import (
    PUBLISHED_OUTPUT_TOKENS,
    PUBLISHED_PROMPT_TOKENS,
    SAMPLE,
    draw,
    first_turns,
    is_valid_sequence,
    read_sample,
    scale_to_total,
)


@pytest.fixture(scope="module")
def sample():
    return read_sample()


def test_the_sample_has_the_published_means(sample):
    """1000 requests; 215,312 prompt and 195,544 output tokens in all (GPUStack's vLLM ShareGPT run), so the means
    are 215.312 and 195.544 tokens, within 0.1% and in fact exact (largest-remainder rounding)."""
    assert len(sample) == 1000
    assert sum(p for p, *_ in sample) / 1000 == pytest.approx(215.312, rel=1e-3)
    assert sum(o for _, o, *_ in sample) / 1000 == pytest.approx(195.544, rel=1e-3)
    assert (sum(p for p, *_ in sample), sum(o for _, o, *_ in sample)) == (PUBLISHED_PROMPT_TOKENS,
                                                                           PUBLISHED_OUTPUT_TOKENS)


def test_vllms_filter_holds_on_the_sources_counts(sample):
    """Every drawn request passes is_valid_sequence as the source (Llama 2's tokenizer) counted it: prompt and output
    4 tokens or more, prompt at most 1024, prompt + output at most 2048; and its lengths are those counts scaled by
    one factor per side (215,312 / 142,317 = 1.513 for prompts, 195,544 / 481,904 = 0.406 for outputs)."""
    raw_p, raw_o = [r[2] for r in sample], [r[3] for r in sample]
    assert all(4 <= p <= 1024 and o >= 4 and p + o <= 2048 for p, o in zip(raw_p, raw_o, strict=True))
    assert (sum(raw_p), sum(raw_o)) == (142_317, 481_904)
    assert [r[0] for r in sample] == scale_to_total(raw_p, PUBLISHED_PROMPT_TOKENS)
    assert [r[1] for r in sample] == scale_to_total(raw_o, PUBLISHED_OUTPUT_TOKENS)
    # the spread the rows gain: prompts 6-1546 tokens (median 88), outputs 2-414 (median 197.5)
    prompts, outputs = sorted(r[0] for r in sample), sorted(r[1] for r in sample)
    assert (prompts[0], prompts[-1], outputs[0], outputs[-1]) == (6, 1546, 2, 414)
    assert (prompts[499] + prompts[500]) / 2 == 88 and (outputs[499] + outputs[500]) / 2 == 197.5


def test_lengths_csv_reads_the_sample_as_shipped(sample):
    """The rows take the file through serving.workload.lengths_csv, the user's path: request i gets row i."""
    _, ins, outs, cached = workload_stream(Workload(lengths_csv=str(SAMPLE)), 215, 196, 1000, 16, Path.cwd())
    assert ins.tolist() == [r[0] for r in sample]
    assert outs.tolist() == [r[1] for r in sample]
    assert not cached.any()


def test_scale_to_total_by_hand():
    assert scale_to_total([1, 2, 3], 12) == [2, 4, 6]
    assert scale_to_total([1, 1, 1], 4) == [2, 1, 1]       # 4/3 each: one largest remainder (the first) rounds up
    assert scale_to_total([1, 100], 10) == [1, 9]          # 0.099 and 9.90: at least one token each


def test_first_turns_and_the_filter_by_hand():
    """The trace's first four rows (74,918), (290,905), (1402,711), (41,950): 290 < 74 + 918 opens a conversation,
    1402 >= 290 + 905 continues it (the prefill holds the history), 41 < 1402 + 711 opens the next."""
    assert first_turns([(74, 918), (290, 905), (1402, 711), (41, 950)]) == [(74, 918), (290, 905), (41, 950)]
    assert is_valid_sequence(4, 4) and is_valid_sequence(1024, 1024)
    assert not is_valid_sequence(3, 100) and not is_valid_sequence(100, 3)
    assert not is_valid_sequence(1025, 10) and not is_valid_sequence(1000, 1049)
    turns = [(74, 918), (290, 905), (2, 10), (1100, 10), (41, 950), (1000, 1049)]
    kept = draw(turns, n=3, seed=0)
    assert sorted(kept) == [(41, 950), (74, 918), (290, 905)]
    with pytest.raises(ValueError, match="only 3 of 6"):
        draw(turns, n=4, seed=0)
