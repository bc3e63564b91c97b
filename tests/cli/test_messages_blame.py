"""Issue 27 item 2: a serving or search limit names the key the user wrote that carries the value, at its line, and
marks a key the user left at its default."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVE = (ROOT / "scenarios" / "serve_llama3_70b_h100_tp8.yaml").read_text()


def write(folder, name, text):
    path = folder / name
    path.write_text(text)
    return str(path)


def line_of(text, start):
    return next(i for i, t in enumerate(text.splitlines(), 1) if t.lstrip().startswith(start))


def test_a_batch_whose_prefill_fills_the_engine_blames_serving_batch(cli, tmp_path):
    """batch 100,000 of 2,048-token prompts without chunked prefill: the prefill's transients (100,000 x 2,304
    tokens x (2 x 8192 + 2 x 28672 / 8) x 2 B = 10,107.4 GiB, and 100,000 x 128,256 / 8 x 2 B = 3.0 GiB of
    last-token logits) fill the engine's share, not a concurrency."""
    text = SERVE.replace("batch: 64", "batch: 100000").replace("  max_batched_tokens: 8192", "")
    path = write(tmp_path, "b.yaml", text)
    code, _, err = cli("serve", path)
    assert code == 2
    assert (f"{path}:{line_of(text, 'batch:')}: serving.batch: the K/V cache holds no sequence: the transients of a "
            "prefill of batch 100,000 x input_len 2,048 tokens (10110.4 GiB per GPU)") in err
    assert "(gpu_memory_utilization 0.92 (default):" in err and "serving.concurrency" not in err


def test_chunked_prefill_of_a_large_batch_blames_serving_batch(cli, tmp_path):
    """max_batched_tokens 8192 takes 4 prompts of 2,048 per step: 100,000 / 4 = 25,000 steps, over 4,096."""
    text = SERVE.replace("batch: 64", "batch: 100000")
    path = write(tmp_path, "c.yaml", text)
    code, _, err = cli("serve", path)
    assert code == 2
    assert (f"{path}:{line_of(text, 'batch:')}: serving.batch: max_batched_tokens 8192 splits the prefill of "
            "100,000 x 2,048 tokens into 25,000 steps, more than 4,096") in err


def test_a_prompt_longer_than_the_cache_blames_serving_input_len(cli, tmp_path):
    """One sequence of 1,000,256 tokens: Llama-3-70B keeps 80 layers x 2 x 8 K/V heads x 128 x 2 B / TP 8 = 40 KiB
    per token per GPU, 38.2 GiB, plus its prefill's transients (43.9 GiB) over the 56.7 GiB the 16.4 GiB of weights
    leave of 0.92 x the H100's HBM less the runtime."""
    text = SERVE.replace("batch: 64", "batch: 1").replace("input_len: 2048", "input_len: 1000000")
    path = write(tmp_path, "i.yaml", text)
    code, _, err = cli("serve", path)
    assert code == 2
    assert (f"{path}:{line_of(text, 'input_len:')}: serving.input_len: the K/V cache holds no sequence: one sequence "
            "of input_len 1,000,000 + output_len 256 = 1,000,256 tokens needs 38.2 GiB of K/V cache") in err


def test_serving_past_learned_positions_blames_serving_input_len(cli, tmp_path):
    """GPT-3 175B has 2,048 learned positions (Brown et al. 2020, n_ctx): 4,096 + 128 tokens cannot be embedded; the
    user never wrote training.seq_len, so the message names the serving key at its line."""
    text = ("system:\n  profile: dgx_a100_80gb\nmodel:\n  preset: gpt3-175b\nparallel:\n  tp: 8\ntraining:\n"
            "  mode: inference\n  precision: bf16\nserving:\n  batch: 8\n  input_len: 4096\n  output_len: 128\n")
    path = write(tmp_path, "g.yaml", text)
    code, _, err = cli("serve", path)
    assert code == 2
    assert (f"{path}:12: serving.input_len: input_len 4096 + output_len 128 = 4224 tokens, but model gpt3-175b has "
            "learned positions for at most 2048 (model.max_position)") in err
    assert "training.seq_len" not in err
