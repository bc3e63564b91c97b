"""Op-level selective checkpointing (``selective_ac_option: op``) in step time: which forward ops re-run in
backward (simulator/program/op_sac.py) and the host constants fitted on the Qwen2.5-0.5B rows of
simulator/validation/data/h200_hf/sac.jsonl (hf_transformers profile)."""

import json
from pathlib import Path

import pytest

from simulator.implementation.profiles import profile_named
from simulator.program import Gemm, LayerProgram, MemOp, op_sac_recomputed_ops
from simulator.validation import hf_train

DATA = Path(hf_train.__file__).parent / "data" / "h200_hf"


def _program(h: int, q: int, kv: int, ffn: int, tokens: int) -> LayerProgram:
    gemms = tuple(Gemm(n, "fwd", tokens, k, cols) for n, k, cols in (
        ("q_proj", h, q), ("k_proj", h, kv), ("v_proj", h, kv), ("o_proj", q, h), ("mlp.fc1", h, 2 * ffn),
        ("mlp.fc2", ffn, h)))
    mems = tuple(MemOp(n, "fwd", 1.0) for n in ("norm1", "rope", "bias_dropout_add.attn", "norm2", "activation",
                                                 "bias_dropout_add.mlp"))
    return LayerProgram(kind="dense", gemms=gemms, memops=mems)


def test_llama_layer_recomputes_k_o_up():
    # Llama-3.2-1B: mm #1 q saved, #2 k re-run, #3 v saved, #4 o re-run, #5 gate saved, #6 up re-run, #7 down saved
    gemms, mems = op_sac_recomputed_ops(_program(2048, 2048, 512, 8192, 4096), False, False, True)
    assert [(g.name, g.n) for g in gemms] == [("k_proj", 512), ("o_proj", 2048), ("mlp.fc1.half6", 8192)]
    # 2 x T x k x n FLOPs each, T = 4096: 2*4096*2048*(512 + 2048 + 8192) = 180,388,626,432
    assert sum(g.flops for g in gemms) == 2 * 4096 * 2048 * (512 + 2048 + 8192) == 180_388_626_432
    assert [m.name for m in mems] == ["norm1", "rope", "bias_dropout_add.attn", "norm2", "activation"]


def test_qwen_layer_recomputes_gate_only():
    # Qwen2.5: q/k/v biased (addmm, saved, not counted); mm #1 o saved, #2 gate re-run, #3 up saved, #4 down
    # re-run by the policy but cut by the checkpoint's early stop (its inputs are the last saved tensors)
    gemms, _ = op_sac_recomputed_ops(_program(896, 896, 128, 4864, 4096), True, False, True)
    assert [(g.name, g.n) for g in gemms] == [("mlp.fc1.half2", 4864)]


def test_policy_decisions_match_the_rule():
    """The recorded per-layer decisions (sac.jsonl): Llama 4 mm saved / 3 re-run, Qwen2.5 2 / 2 and 3 addmm."""
    runs = [json.loads(x) for x in (DATA / "sac.jsonl").read_text().splitlines() if x.strip()]
    layers = {"llama-3.2-1b": 16, "qwen2.5-0.5b": 24, "qwen2.5-1.5b": 28}
    for r in (r for r in runs if r.get("section") == "sac"):
        d, n = r["sac_forward_decisions"], layers[r["model"]]
        assert d["aten.mm.default:recompute"] == (3 if r["model"] == "llama-3.2-1b" else 2) * n
        assert d.get("aten.addmm.default:save", 0) == (0 if r["model"] == "llama-3.2-1b" else 3 * n)


def _host(files: tuple[str, ...], section: str, mb: int, ckpt) -> list[dict]:
    runs = [json.loads(x) for f in files for x in (DATA / f).read_text().splitlines() if x.strip()]
    return [r for r in runs if r.get("section") == section and r.get("model") == "qwen2.5-0.5b"
            and r.get("micro_batch") == mb and r.get("case") == "train" and r.get("checkpointing") == ckpt]


def test_host_constants_are_the_qwen_05b_rows():
    """(SAC host - mean unchecked host) / (24 layers x 41 kernels), Qwen2.5-0.5B only: forward the 8x2048 row
    ((71.33 - 28.73) ms / 984 = 43.3 us; the 4x1024 row gives 89.4 us), backward the host-bound 4x1024 row
    ((105.86 - 45.52) ms / 984 = 61.4 us)."""
    host = profile_named("hf_transformers").host
    per = {}
    for mb in (4, 8):
        base = _host(("train.jsonl", "train_run2.jsonl"), "dense", mb, False)
        sac = _host(("sac.jsonl",), "sac", mb, "op_sac")[0]
        assert len(base) == 2
        per[mb] = [(sac[k] - sum(b[k] for b in base) / 2) / (24 * 41) for k in ("host_fwd_s_median",
                                                                              "host_bwd_s_median")]
    assert per[4][0] == pytest.approx(89.4e-6, abs=0.1e-6)
    assert host.sac_forward_kernel_s == pytest.approx(min(per[4][0], per[8][0]), abs=0.05e-6) == 43.3e-6
    assert host.sac_backward_kernel_s == pytest.approx(per[4][1], abs=0.05e-6) == 61.4e-6


def test_sac_step_time_between_no_checkpointing_and_host_floor():
    """Llama-3.2-1B 4x1024 (a validation row): op SAC costs more than no checkpointing (re-run ops, dispatch mode)
    and the model lands within 5% of the measured 118.4 ms."""
    rows = {r.case: r for r in hf_train.train_rows(files=hf_train.SAC_FILES)}
    plain = {r.case: r for r in hf_train.train_rows()}
    sac, base = rows["llama-3.2-1b-4x1024-op-SAC"], plain["llama-3.2-1b-4x1024"]
    assert sac.predicted_s > base.predicted_s
    assert abs(sac.time_error) <= 0.05


def test_step_recompute_is_the_re_run_ops_of_every_layer():
    """Llama-3.2-1B 4x1024 with framework pytorch (no host floor): the step's recompute is 16 layers x the
    ``op_sac`` module's seconds, and its FLOPs 16 x 180.4 GFLOP of k, o and up re-run (by hand above)."""
    from simulator.entries.simulate import simulate
    from simulator.scenario.load import load_scenario

    run = next(r for r in hf_train.measured_runs(hf_train.SAC_FILES)
               if r["model"] == "llama-3.2-1b" and r["micro_batch"] == 4)
    result = simulate(load_scenario(hf_train.scenario_for(run, framework="pytorch")))
    none = dict(hf_train.scenario_for(run, framework="pytorch"), parallel={"dp": 1, "recompute": "none"})
    base = simulate(load_scenario(none))
    assert base.step.recompute_s == 0.0
    assert result.step.recompute_s > 0.0
    # the re-run is a share of the forward: more than the three GEMMs' time at the tensor peak, less than a forward
    peak = 989.4e12        # H200 dense bf16 FLOP/s (NVIDIA H200 datasheet, 1979 TFLOPS with sparsity)
    assert 16 * 180_388_626_432 / peak < result.step.recompute_s < result.step.compute_s / 3
