"""Issue 27 item 2: a serving or search limit names the key the user wrote that carries the value, at its line, and
marks a key the user left at its default."""

import json
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


NOTHING_FITS = ("name: nothing-fits\nsystem:\n  profile: dgx_h100\n  gpus: 2\nmodel:\n  preset: llama3-70b\n"
                "training:\n  seq_len: 4096\n  global_batch: 8\n  precision: bf16\nsearch:\n  micro_batch: [1, 2]\n"
                # issue 13's knobs (no offload, which would put the states on the host; one split, no TP overlap)
                "  offload: [none]\n  schedule: [1f1b, gpipe]\n  split: [uniform]\n  tp_comm_overlap: [false]\n"
                "  recompute_modules: [[core_attn]]\n")


def test_a_search_where_nothing_fits_names_memory(cli, tmp_path):
    """Llama-3-70B on 2 H100s: no plan that passes the rules fits. The memory bound (simulator/search/
    memory_bound.py) skips all 102 candidates whose representative passes the rules, unresolved; the smallest bound
    is ZeRO-3 over dp 2 with full recompute: 70.55e9 parameters x 16 B (bf16 weights and gradients, fp32 main copy
    and two Adam moments) / 2 = 564.4e9 B of model states, plus each of the 80 layers' input kept by full recompute,
    4,096 tokens x 8,192 x 2 B = 67.1e6 B (5.4e9 B = 5.0 GiB), plus NCCL's buffers and the runtime: 533.5 GiB
    (528.5 GiB without the activations, what the states floor alone gave before the bound) over 79.6 GiB."""
    path = write(tmp_path, "s.yaml", NOTHING_FITS)
    code, out, err = cli("search", path)
    assert code == 2 and out == ""
    assert (f"{path}: search: no valid plan among 2,712 candidates: 102 were skipped unresolved, a lower bound of "
            "their device peak above HBM (each out of memory or rejected by a rule); the smallest device peak, at "
            "least 533.5 GiB (tp 1 pp 1 dp 2, zero3, recompute full, micro_batch 1), exceeds the GPU's 79.6 GiB; "
            "the other 2,610 were rejected by the rules") in err
    code, out, err = cli("search", path, "--json")
    assert code == 2 and "device peak above HBM" in err
    result = json.loads(out)
    assert result["valid"] == 0 and result["plans"] == [] and result["evaluated"] == 2712
    fit = result["no_fit"]
    assert fit["passed_rules"] == 0 and fit["memory_bound_skipped"] == 102 and fit["memory_headroom_bytes"] == 0
    assert fit["capacity_bytes"] == 81_559 * 2**20  # the H100 SXM as nvidia-smi reports it (hardware_profiles)
    states, layers = 564.4e9, 80 * 4096 * 8192 * 2
    assert states + layers <= fit["least_device_peak_bytes"] <= states + layers + 4 * 2**30
    assert fit["least_device_peak_exact"] is False
    assert fit["least_peak_plan"] == {"gpus": 2, "tp": 1, "pp": 1, "dp": 2, "cp": 1, "ep": 1, "vpp": 1,
                                      "schedule": "1f1b", "recompute": "full", "sharding": "zero3", "micro_batch": 1}


def test_a_scenario_named_as_calibration_says_what_a_calibration_file_is(cli, tmp_path):
    quickstart = ROOT / "scenarios" / "quickstart.yaml"
    text = quickstart.read_text()
    path = write(tmp_path, "c.yaml", f"system:\n  profile: dgx_h100\n  calibration: {quickstart}\nmodel:\n"
                                     "  preset: llama3-8b\nparallel:\n  tp: 8\ntraining:\n  seq_len: 2048\n"
                                     "  micro_batch: 1\n  global_batch: 8\n")
    code, _, err = cli("run", path)
    assert code == 2
    assert (f"{quickstart}:{line_of(text, 'name:')}: name: this file was read as a calibration file, but it is a "
            "scenario: name, model, parallel, training are not calibration keys. A calibration file (what "
            "`simulator calibrate` writes; system.calibration and --calibration name one) has `system:`") in err
    assert "entries:" in err and "unknown key" not in err
