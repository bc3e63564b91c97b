"""The MoE permute / unpermute and the cross entropy as frameworks run them (simulator.program.op_chains): the
tables re-derived from their H200 measurement, bytes by hand, and what the engine and the memory model do with
them."""

import json

import pytest
import yaml

from simulator.compute import default_efficiency
from simulator.entries.simulate import simulate
from simulator.errors import UserError
from simulator.implementation.profiles import profile_named
from simulator.model import load_model_preset as get_preset
from simulator.plan import ParallelPlan, TrainingConfig, resolve_recipe
from simulator.plan.rules import check_training_switches
from simulator.pricing.compute import layer_time
from simulator.pricing.host import host_issue_costs
from simulator.pricing.overlap import coefficients
from simulator.program.memops import LayerShape, head_memops, layer_memops
from simulator.program.op_chains import (
    CHAIN_DATA,
    CROSS_ENTROPY_BYTES,
    FUSED_PERMUTE,
    PERMUTE_CHAINS,
    SEQUENTIAL_ASSEMBLY,
    fit_permute_chains,
    fit_sequential_assembly,
    fit_torch_cross_entropy,
    fit_unfused_cross_entropy,
)
from simulator.scenario.load import load_scenario
from simulator.schedule.cache import StepCache
from simulator.schedule.inputs import layer_inputs, layer_times
from simulator.schedule.stragglers import straggler_factor
from simulator.validation import published

#: the eager MoE host floor of the megatron profile (measured on the H200)
MEGATRON_HOST = host_issue_costs(profile_named("megatron"))

MIXTRAL_FLAGPERF = published.RUNS / "flagperf_mixtral8x7b_h100_32.yaml"


def test_tables_are_the_fits_of_their_measurement():
    """The constants are the least-squares fits of the H200 log, to the digits written (rounding: 0.01 B)."""
    fitted = fit_permute_chains()
    assert set(fitted) == {"index_select", "index_copy", "gather_scatter"}
    for name, chain in fitted.items():
        for field in ("fwd_row", "fwd_token", "bwd_row", "bwd_token"):
            assert getattr(PERMUTE_CHAINS[name], field) == pytest.approx(getattr(chain, field), abs=0.006)
    seq = fit_sequential_assembly()
    for field in ("fwd", "fwd_per_expert", "bwd", "bwd_per_expert"):
        assert getattr(SEQUENTIAL_ASSEMBLY, field) == pytest.approx(getattr(seq, field), abs=0.006)
    assert CROSS_ENTROPY_BYTES["unfused"] == pytest.approx(fit_unfused_cross_entropy(), abs=0.06)


def test_fits_reproduce_every_measured_shape():
    """Each chain's fit lands within 7% of every shape it was fitted to (index_copy, the least linear, 6.6%)."""
    rows = [json.loads(line) for line in open(CHAIN_DATA) if '"kind": "path"' in line]
    for name in ("index_select", "index_copy", "gather_scatter"):
        chain = PERMUTE_CHAINS[name]
        for r in (r for r in rows if r["case"] == f"{name}_fwd_bwd"):
            fwd, bwd = chain.bytes(r["R"], r["T"], r["h"])
            assert (fwd + bwd) == pytest.approx(r["copy_equiv_bytes"], rel=0.07), (name, r["T"], r["k"], r["h"])


def test_every_unfused_chain_costs_more_than_the_fused_kernels():
    """At top-2 (R = 2T) each measured chain moves 5-8x the fused pair's 16 R h bytes, and the sequential
    assembly grows with the expert count (CopySlices clones the gradient once per expert)."""
    for name in ("index_select", "index_copy", "gather_scatter"):
        fwd, bwd = PERMUTE_CHAINS[name].bytes(2.0, 1.0, 1.0)
        assert 5 < (fwd + bwd) / sum(FUSED_PERMUTE.bytes(2.0, 1.0, 1.0)) < 8
    assert sum(SEQUENTIAL_ASSEMBLY.bytes(1.0, 1.0, 16)) > 1.9 * sum(SEQUENTIAL_ASSEMBLY.bytes(1.0, 1.0, 8)) * 0.99


def test_gather_scatter_bytes_of_the_flagperf_mixtral_layer_by_hand():
    """Mixtral 8x7B at TP8 / EP1 with sequence parallelism, micro-batch 3 x 4096: the dispatcher gathers T = 12288
    tokens, R = 24576 routed rows, h = 4096. Forward (51.81 x 24576 + 7.87 x 12288) x 4096 = 5,611,475,435.52 B,
    backward (59.91 x 24576 + 3.80 x 12288) x 4096 = 6,221,998,325.76 B (fused: 805,306,368 B each way)."""
    model = get_preset("mixtral-8x7b")
    shape = LayerShape(tokens=12288, norm_tokens=1536, scores=0.0, ffn_local=0.0, qk_width=0.0,
                       expert_ffn_local=14336 / 8)
    ops = {(o.name, o.phase): o.bytes for o in layer_memops(model, shape, unfused_attention=False,
                                                             moe_routed_tokens=24576,
                                                             permute=PERMUTE_CHAINS["gather_scatter"])}
    assert ops["moe_permute", "fwd"] == pytest.approx(5_611_475_435.52, rel=1e-9)
    assert ops["moe_permute", "bwd"] == pytest.approx(6_221_998_325.76, rel=1e-9)
    fused = {(o.name, o.phase): o.bytes for o in layer_memops(model, shape, unfused_attention=False,
                                                              moe_routed_tokens=24576)}
    assert fused["moe_permute", "fwd"] == fused["moe_permute", "bwd"] == 8 * 24576 * 4096
    assert ("expert_assembly", "fwd") not in fused


def test_sequential_assembly_bytes_by_hand():
    """8 local experts, R = 16384 rows of h 2048: forward (6.46 + 0.22 x 8) x R h = 8.22 x 33,554,432 B, backward
    (4.42 + 12.99 x 8) x R h = 108.34 x 33,554,432 B."""
    model = get_preset("mixtral-8x7b")
    shape = LayerShape(tokens=8192, norm_tokens=8192, scores=0.0, ffn_local=0.0, qk_width=0.0,
                       expert_ffn_local=5504)
    ops = {(o.name, o.phase): o.bytes for o in layer_memops(model.model_copy(update={"hidden": 2048}), shape,
                                                             unfused_attention=False, moe_routed_tokens=16384,
                                                             sequential_experts=8)}
    assert ops["expert_assembly", "fwd"] == pytest.approx(8.22 * 16384 * 2048, rel=1e-9)
    assert ops["expert_assembly", "bwd"] == pytest.approx(108.34 * 16384 * 2048, rel=1e-9)


def test_unfused_cross_entropy_bytes_per_logit_by_hand():
    """The loss of 8192 tokens over a 151,936 vocabulary on one rank: 52.9 B forward and 17.4 B backward per
    logit unfused, 6 + 6 fused."""
    model = get_preset("llama3-8b")
    n = 8192 * 151936
    unfused = {(o.name, o.phase): o.bytes for o in head_memops(model, 8192, 8192, 151936, CROSS_ENTROPY_BYTES["unfused"])}
    fused = {(o.name, o.phase): o.bytes for o in head_memops(model, 8192, 8192, 151936)}
    assert unfused["cross_entropy", "fwd"] == pytest.approx(52.9 * n) and unfused["cross_entropy", "bwd"] == pytest.approx(17.4 * n)
    assert fused["cross_entropy", "fwd"] == fused["cross_entropy", "bwd"] == 6 * n


def _flagperf_mixtral(tmp_path, **edits):
    data = yaml.safe_load(MIXTRAL_FLAGPERF.read_text())
    for section, values in edits.items():
        data.setdefault(section, {}).update(values)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return simulate(load_scenario(path))


def test_engine_prices_the_chosen_chain_and_loss(tmp_path):
    """The FlagPerf Mixtral run as its sources say (gather_scatter, unfused loss) against the fused defaults: the
    busiest stage's compute grows by the chains' extra bytes at the model's streaming rate (H100 3,352 GB/s x
    0.803), times the expected-slowest-of-32-GPUs factor every compute time carries; nothing else moves."""
    as_run = _flagperf_mixtral(tmp_path)
    fused = _flagperf_mixtral(tmp_path, moe={"permute": "fused"}, training={"cross_entropy": "fused"})
    assert default_efficiency("hopper").memory_efficiency == pytest.approx(0.803)
    rate, slowest = 3.352e12 * 0.803, straggler_factor(32, coefficients()["gpu_speed_sigma"])
    # per MoE layer and micro-batch ((51.81 - 8 + 59.91 - 8) R + (7.87 + 3.80) T) h, 16 layers x 200 micro-batches;
    # the loss on the last stage (52.9 + 17.4 - 12) B x 12288 tokens x 4096 logits (32000 padded to 32768 / TP8)
    permute = ((51.81 - 8 + 59.91 - 8) * 24576 + (7.87 + 3.80) * 12288) * 4096 * 16 * 200 / rate
    loss = (52.9 + 17.4 - 12) * 12288 * 4096 * 200 / rate
    assert as_run.step.critical_stage == fused.step.critical_stage == 1
    assert as_run.step.compute_s - fused.step.compute_s == pytest.approx((permute + loss) * slowest, rel=1e-3)
    assert as_run.step.exposed_comm_s == fused.step.exposed_comm_s


def test_unfused_loss_keeps_a_second_fp32_copy_of_the_logits(tmp_path):
    """Only the last stage changes: + 4 B x 12288 tokens x 4096 logits per rank (Megatron pads the vocabulary 32000
    to 32768, a multiple of 128 x TP8, and its output layer computes logits over all of it: 32768 / 8)."""
    as_run = _flagperf_mixtral(tmp_path, moe={"permute": "fused"})
    fused = _flagperf_mixtral(tmp_path, moe={"permute": "fused"}, training={"cross_entropy": "fused"})
    last, first = as_run.memory.stages[-1], as_run.memory.stages[0]
    assert last.peak - fused.memory.stages[-1].peak == pytest.approx(4 * 12288 * 4096, rel=1e-6)
    assert first.peak == fused.memory.stages[0].peak


def test_sequential_experts_drop_the_grouped_kernel_penalty():
    """Experts run one by one price each expert GEMM as a dense GEMM: per expert GEMM op the grouped time is
    launch + (dense - launch) / grouped_fraction, so dense = launch + (grouped - launch) x grouped_fraction (two
    forward ops, fc1 and fc2, each batched over the 8 local experts); the assembly adds its bytes."""
    s = load_scenario(MIXTRAL_FLAGPERF)
    gpu, eff = s.cluster.node.gpu, default_efficiency("hopper")
    kw = dict(layer_index=0, attention="flash2")
    grouped = layer_time(s.model, s.plan.shape, gpu, eff, "bf16", **kw)
    sequential = layer_time(s.model, s.plan.shape, gpu, eff, "bf16", sequential_experts=True, **kw)
    launch, frac = eff.launch_s, eff.grouped_fraction("bf16")
    assert frac < 1
    assert sequential.expert_fwd_s == pytest.approx(2 * launch + (grouped.expert_fwd_s - 2 * launch) * frac, rel=1e-9)
    assembly_fwd = SEQUENTIAL_ASSEMBLY.bytes(24576, 4096, 8)[0] / (gpu.memory.bandwidth * eff.memory_efficiency)
    other_fwd = lambda lt: lt.fwd_s - lt.fwd_gemm_s - lt.attn_fwd_s  # noqa: E731 - memory-bound forward time
    assert other_fwd(sequential) - other_fwd(grouped) == pytest.approx(assembly_fwd + eff.launch_s, rel=1e-9)


@pytest.mark.parametrize("section,key,value", [("moe", "permute", "torch_gather"), ("moe", "experts", "loop"),
                                               ("training", "cross_entropy", "apex")])
def test_unknown_implementation_names_are_user_errors(tmp_path, section, key, value):
    data = yaml.safe_load(MIXTRAL_FLAGPERF.read_text())
    data.setdefault(section, {})[key] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError) as err:
        load_scenario(path)
    assert f"{section}.{key}" in str(err.value)


def test_all_to_all_dispatcher_sorts_received_rows_by_local_expert():
    """Megatron's all-to-all dispatcher (backend nccl) reorders the rows it receives by local expert after the
    all-to-all and back before the combine (sort_chunks_by_idxs, token_dispatcher.py): one more read and write of
    the R routed rows each way, 8 R h forward and 8 R h backward, only with EP > 1 and more than one local expert.
    The zoo's Qwen3-235B A2A row (EP 8: 16 local experts; R = 2048 tokens per rank at TP 2 with sequence
    parallelism x top-8 = 16384 rows)."""
    s = load_scenario(published.RUNS / "zoo_qwen3_235b_a2a_pp32.yaml")
    sh = s.plan.shape
    assert (sh.ep, sh.local_experts, sh.routed_rows) == (8, 16, 16384)
    gpu, eff = s.cluster.node.gpu, default_efficiency("hopper")
    kw = dict(layer_index=1, attention="flash")
    plain = layer_time(s.model, sh, gpu, eff, "bf16", **kw)
    sorted_ = layer_time(s.model, sh, gpu, eff, "bf16", sort_chunks=True, **kw)
    one_way = 8 * 16384 * 4096 / (gpu.memory.bandwidth * eff.memory_efficiency) + eff.launch_s
    assert sorted_.fwd_s - plain.fwd_s == pytest.approx(one_way, rel=1e-9)
    assert sorted_.bwd_s - plain.bwd_s == pytest.approx(one_way, rel=1e-9)
    # the engine applies it to this nccl row and not to the DeepEP rows (DeepEP hands back expert-major rows)
    deepep = load_scenario(published.RUNS / "zoo_qwen3_235b_deepep_ep32.yaml")
    for scenario, expected in ((s, True), (deepep, False)):
        cache = StepCache()
        fixed = cache.fixed(scenario.model, gpu, eff, None, None, scenario.moe)
        lt = dict(layer_times(cache, fixed, layer_inputs(scenario.plan, "bf16", scenario.moe)))[True]
        ref = layer_time(scenario.model, scenario.plan.shape, gpu, eff, "bf16", layer_index=1,
                         attention=scenario.plan.recipe.attention, sort_chunks=expected,
                         host=MEGATRON_HOST)
        assert lt.fwd_s == pytest.approx(ref.fwd_s, rel=1e-12)


def test_plain_pytorch_loss_is_its_measured_chain():
    """framework pytorch prices F.cross_entropy(logits.float()) as measured on the H200 (28.0 + 27.1 B per logit,
    the fit of cross_entropy.jsonl); training.cross_entropy picks Megatron's implementation and is refused with
    another framework (exit 2 through the CLI's UserError)."""
    assert CROSS_ENTROPY_BYTES["pytorch"] == pytest.approx(fit_torch_cross_entropy(), abs=0.06)
    assert resolve_recipe(ParallelPlan(), TrainingConfig(framework="pytorch")).cross_entropy == "pytorch"
    assert resolve_recipe(ParallelPlan(), TrainingConfig()).cross_entropy == "fused"
    with pytest.raises(UserError) as err:
        check_training_switches(ParallelPlan(), TrainingConfig(framework="pytorch", cross_entropy="fused"))
    assert err.value.key_path == "training.cross_entropy"
