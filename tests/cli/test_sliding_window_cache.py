"""``serving.sliding_window_cache`` at the CLI: a windowed rule on a cache that keeps every token, and an unknown
rule, exit 2 naming the file, the line and the key."""

BAD = """system: {profile: dgx_h100, gpus: 1}
model: {preset: gpt-oss-120b}
training: {mode: inference, precision: fp4}
serving:
  batch: 1
  input_len: 1000
  output_len: 10
  kernels: hf_eager
  kv_cache_impl: concat
  sliding_window_cache: window
"""


def test_a_window_rule_on_an_hf_cache_exits_2(cli, tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(BAD)
    code, _, err = cli("serve", str(path))
    assert code == 2
    assert (f"{path}:10: serving.sliding_window_cache: sliding_window_cache window is a paged cache's rule (vLLM, "
            "SGLang); kv_cache_impl concat keeps every token") in err


def test_an_unknown_rule_exits_2(cli, tmp_path):
    path = tmp_path / "u.yaml"
    path.write_text(BAD.replace("  kernels: hf_eager\n  kv_cache_impl: concat\n", "")
                    .replace("sliding_window_cache: window", "sliding_window_cache: rolling"))
    code, _, err = cli("serve", str(path))
    assert code == 2
    assert f"{path}:8: serving.sliding_window_cache: Input should be 'full', 'window' or 'swa_pool'" in err
