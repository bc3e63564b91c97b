"""Published training runs of the development set, second part: the FlagPerf Megatron cases and the Megatron-Core MoE
model zoo (runs.py holds the MLPerf, MT-NLG and BLOOM runs, the source constants and the CSV header; the entries'
fields are described there)."""

from simulator.validation.data.published_runs.runs import FLAG, MCORE_MOE, ZOO

RUNS: list[dict] = []

def _flagperf_measured(tok_gpu, gpus, gbs, seq, mem_gb):
    """FlagPerf's measurement fields: the README's tokens/s per GPU over all GPUs, the step it implies
    (GBS x seq / tokens/s), nvidia-smi's memory in GB converted to GiB; benchmark runs, not trainings."""
    return dict(measured_quantity="tokens_per_s", measured_value=round(tok_gpu * gpus, 1),
                measured_memory_GiB=round(mem_gb * 1e9 / 2**30, 1) if mem_gb else "", trained="no",
                measured_step_s=gbs * seq / (tok_gpu * gpus))


def _flag_llama(id, preset, nodes, tp, pp, gbs, tok_gpu, mem, readme, cfg, seq=8192, gpu="H100-SXM5-80GB",
                profile="dgx_h100", table="性能指标 table"):
    gpus = nodes * 8
    dp = gpus // (tp * pp)
    step = gbs * seq / (tok_gpu * gpus)
    return dict(
        id=id, group="dense", source=f"FlagPerf (BAAI) NVIDIA Megatron-Core case, {FLAG}",
        source_locator=f"{readme} ({table}); {cfg}; training/benchmarks/{'llama3_70B' if '70' in preset else 'llama3_8B'}/megatron/pretrain_llama3.sh",
        gpu=gpu, gpus=gpus, nodes=nodes, model=preset, params_B=70 if "70" in preset else 8,
        seq_len=seq, global_batch=gbs, micro_batch=1, tp=tp, pp=pp, vpp=1, cp=1, ep=1, dp=dp, sp="yes" if tp > 1 else "no",
        zero_or_distopt="distopt (--use-distributed-optimizer)", recompute="selective (README says recompute-activations; script has no flag)",
        precision="bf16", **_flagperf_measured(tok_gpu, gpus, gbs, seq, mem),
        unsaid=("recompute=selective (README lists recompute-activations, pretrain_llama3.sh does not pass it; with flash "
                "attention the two differ little);overlap_grad_reduce=false;overlap_param_gather=false (not passed; "
                "Megatron core_v0.6 default off);tp_comm_overlap=false (not passed);memory = nvidia-smi GB used "
                "(reported X/80), converted to GiB"),
        notes=(f"Benchmark run (300 steps), token/p/s = {tok_gpu} per GPU from Megatron 'elapsed time per iteration'; "
               f"step = GBS*seq/tokens_per_s = {step:.2f} s. Megatron-Core core_v0.6.0, TE, --use-flash-attn; "
               "attention_kernel flash2: the README's optimisation list names 'flash attention 2' (优化策略). "
               "cross_entropy unfused: core_v0.6 has no loss fusion option and computes the loss with "
               "tensor_parallel.vocab_parallel_cross_entropy(logits.float(), labels) (language_module.py)."),
        yaml_comment=(f"{id}: FlagPerf {preset} Megatron-Core on {gpus} {gpu.split('-')[0]}, TP{tp} PP{pp} DP{dp}, GBS {gbs}, "
                      f"seq {seq}.\nSource: {FLAG} {readme}.\n"
                      f"Measured: {tok_gpu} tokens/s per GPU ({step:.2f} s per step), memory {mem}/80 GB."),
        scenario=dict(name=id, system=dict(profile=profile, nodes=nodes), model=dict(preset=preset),
                      parallel=dict(tp=tp, pp=pp, dp=dp, sp=tp > 1, recompute="selective", distributed_optimizer=True),
                      training=dict(seq_len=seq, micro_batch=1, global_batch=gbs, precision="bf16",
                                    attention_kernel="flash2", cross_entropy="unfused",
                                    framework="megatron_core_te")))


R70 = "training/nvidia/llama3_70B-megatron/README.md"
R8 = "training/nvidia/llama3_8B-megatron/README.md"
RUNS += [
    _flag_llama("flagperf_llama3_70b_h100_64", "llama3-70b", 8, 8, 4, 512, 851, 55, R70,
                "training/nvidia/llama3_70B-megatron/config/config_H100x8x8.py"),
    _flag_llama("flagperf_llama3_8b_h100_8", "llama3-8b", 1, 2, 1, 512, 8103, 71, R8,
                "training/nvidia/llama3_8B-megatron/config/config_H100x1x8.py"),
    _flag_llama("flagperf_llama3_8b_h100_16", "llama3-8b", 2, 2, 1, 512, 7914, 62, R8,
                "training/nvidia/llama3_8B-megatron/config/config_H100x1x8.py (TP2 PP1; 2 nodes)"),
    _flag_llama("flagperf_llama3_8b_h100_440", "llama3-8b", 55, 2, 1, 1760, 7047, 55, R8,
                "training/nvidia/llama3_8B-megatron/config/config_H100x1x8.py (TP2 PP1; 55 nodes, gbs=1760)"),
]
# The same README's A100 rows: one DGX A800 (A800-SXM4-80GB, NVLink 400 GB/s), megatron-core core_v0.6.0, flash
# attention 2, the baseline plan and its ablation table (A100单机8卡 消融实验). Its PP1DP8TP1 row ran out of memory
# and has no time; docs/validation/published.md states what the model predicts for it.
_A800 = dict(gpu="A800-SXM4-80GB", profile="dgx_a800_80gb")
_A8CFG = "training/nvidia/llama3_8B-megatron/config/config_A100x1x8.py"
RUNS += [
    _flag_llama("flagperf_llama3_8b_a800_pp2dp4tp1", "llama3-8b", 1, 1, 2, 512, 3698.7, 76, R8, _A8CFG, **_A800),
    *(_flag_llama(f"flagperf_llama3_8b_a800_pp{pp}dp{8 // (pp * tp)}tp{tp}", "llama3-8b", 1, tp, pp, 512, tok, mem, R8,
                  f"{_A8CFG} (tensor_parallel {tp}, pipeline_parallel {pp})", table="A100单机8卡 消融实验 table",
                  **_A800)
      for pp, tp, tok, mem in ((4, 1, 3306.5, 59), (2, 2, 3409.2, 51), (2, 4, 3006.1, 35),
                               (8, 1, 2690.3, 55), (1, 8, 2451.2, 30), (4, 2, 3042.7, 45))),
]

# Mixtral 8x7B, Megatron-Core MoE README: 438 TFLOPS at MCore v0.8 with the v0.8 reference mapping.
# Megatron's num_floating_point_operations (MCore v0.8): 12 B s L h^2 [(1 + g/a + s/h) q/h + (f/h) k (3/2 swiglu)
#   + V/(2 L h)]: full (non-causal) s x s attention, no recompute, router ignored.
_B, _S, _L, _H, _A, _G, _F, _K, _V = 256, 4096, 32, 4096, 32, 8, 14336, 2, 32000
MIXTRAL_FLOPS = 12 * _B * _S * _L * _H**2 * ((1 + _G / _A + _S / _H) + (_F / _H) * _K * 1.5 + _V / (2 * _L * _H))
MIXTRAL_STEP = MIXTRAL_FLOPS / (438e12 * 64)
RUNS.append(dict(
    id="mcore_mixtral8x7b_h100_64", group="moe", source=f"Megatron-Core MoE README, {MCORE_MOE}",
    source_locator=("intro ('438 TFLOPS' Mixtral 8x7B bf16, MCore v0.8) + 'Reference Best Parallel Mapping' table "
                    "(MCore v0.8: 64 GPUs, seq 4096, TP1 EP8 PP4 VP8 MBS1 GBS256, All-to-All, dropless) + 'Detailed "
                    "Benchmark Information' (8xH100 80GB, NVLink 4, IB 8x400 Gb/s)"),
    gpu="H100-SXM5-80GB", gpus=64, nodes=8, model="mixtral-8x7b", params_B=46.7, seq_len=4096, global_batch=256,
    micro_batch=1, tp=1, pp=4, vpp=8, cp=1, ep=8, dp=16, sp="no", zero_or_distopt="distopt (assumed)",
    recompute="none (assumed)", precision="bf16", measured_quantity="tflops_per_gpu", measured_value=438,
    measured_memory_GiB="", trained="no",
    unsaid=("distributed_optimizer=true;overlap_grad_reduce=true;overlap_param_gather=true (README example script "
            "and best-practice list);recompute=none (not stated);routing=uniform (dropless, balance not stated);"
            "moe backend=nccl all-to-all (Dispatcher All-to-All);cross_entropy=fused (--cross-entropy-loss-fusion not "
            "stated)"),
    notes=("TFLOPS = Megatron num_floating_point_operations (full s^2 attention, top-2 experts, swiglu x1.5, logits; "
           f"no recompute) -> {MIXTRAL_FLOPS:.4e} FLOP per step; step = FLOP/(438e12 x 64) = {MIXTRAL_STEP:.3f} s. "
           "The README pairs the v0.8 number with the v0.8 mapping; the newer README says 468 TFLOPS with v0.9 "
           "(same mapping table) - not used. Not a training run, a benchmark. permute index_copy: MCore v0.8's "
           "all-to-all dispatcher permutes with moe_utils.permute / unpermute (index_select; index_copy_, probs, "
           "sum over k); --moe-permute-fusion came later. cross entropy: --cross-entropy-loss-fusion exists in "
           "v0.8 but is off by default; the README does not say (fused assumed)."),
    measured_step_s=MIXTRAL_STEP,
    yaml_comment=("mcore_mixtral8x7b_h100_64: Mixtral 8x7B, 64 H100, TP1 EP8 PP4 VPP8, MBS1 GBS256 seq 4096, BF16.\n"
                  f"Source: {MCORE_MOE}.\nMeasured: 438 TFLOP/s per GPU (Megatron formula) = {MIXTRAL_STEP:.3f} s per step."),
    scenario=dict(name="mcore_mixtral8x7b_h100_64", system=dict(profile="dgx_h100", nodes=8),
                  model=dict(preset="mixtral-8x7b"),
                  parallel=dict(tp=1, pp=4, vpp=8, ep=8, dp=16, recompute="none", distributed_optimizer=True,
                                overlap_grad_reduce=True, overlap_param_gather=True),
                  training=dict(seq_len=4096, micro_batch=1, global_batch=256, precision="bf16"),
                  moe=dict(backend="nccl", distribution="uniform", permute="index_copy"))))

QWEN3 = dict(name="qwen3-235b-a22b", layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128, ffn_hidden=12288,
             vocab=151936, activation="swiglu", norm="rmsnorm", position_embedding="rope", max_position=4096,
             qk_norm=True, tied_embeddings=False,
             moe=dict(experts=128, top_k=8, expert_ffn_hidden=1536))
QLOC = "best_practice/qwen3/readme.md (Performance Results, H100 table)"


def _qwen(id, row, tp, ep, pp, vpp, dp, edp, recompute, backend, step, tflops, layers, extra_unsaid="",
          overlap=False, **par):
    return dict(
        id=id, group="moe", source=f"Megatron MoE model zoo (NVIDIA Megatron-Core MoE team), {ZOO}",
        source_locator=f"{QLOC}, row: {row}; model_configs/benchmarking/Qwen3-235B-A22B.yaml; best_practice/qwen3/run_h100_235b.sh",
        gpu="H100-SXM5-80GB", gpus=256, nodes=32, model="Qwen3-235B-A22B (94L h4096, 128 experts top-8)",
        params_B=235, seq_len=4096, global_batch=2048, micro_batch=1, tp=tp, pp=pp, vpp=vpp, cp=1, ep=ep, dp=dp,
        sp="yes", zero_or_distopt="distopt (+overlap grad/param gather)", recompute=recompute, precision="bf16",
        measured_quantity="step_s", measured_value=step, measured_memory_GiB="", trained="no",
        unsaid=("routing=uniform (run script passes --moe-router-force-load-balancing; the table row does not say);"
                + ("" if overlap else "EP overlap off (the +1f1b overlap row is separate);") + "pipeline_layers per "
                "--account-for-embedding/loss-in-pipeline-split" + extra_unsaid),
        notes=(f"Table: step time {step} s, {tflops} TFLOP/s per GPU; ETP 1, EDP {edp} (MoE parallel folding: "
               f"EP spans TP x DP). recompute '{recompute}' = --recompute-granularity selective "
               "--recompute-modules layernorm moe_act (best_practice/qwen3/run_235b.sh), written as "
               "recompute_modules. CUDA graphs for router/preprocess in script."),
        measured_step_s=step,
        yaml_comment=(f"{id}: Qwen3-235B-A22B on 256 H100 (32 nodes), TP{tp} EP{ep} PP{pp} VPP{vpp} DP{dp}, MBS1 GBS2048 seq 4096, BF16.\n"
                      f"Source: {ZOO} {QLOC}.\nMeasured: {step} s per step ({tflops} TFLOP/s/GPU)."),
        scenario=dict(name=id, system=dict(profile="dgx_h100", nodes=32), model=dict(QWEN3),
                      parallel=dict(tp=tp, pp=pp, vpp=vpp, ep=ep, etp=1, dp=dp, sp=True,
                                    recompute="selective" if recompute != "none" else "none",
                                    **({"recompute_modules": ["layernorm", "moe_act"]} if recompute != "none" else {}),
                                    distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True,
                                    pipeline_layers=layers, **par),
                      training=dict(seq_len=4096, micro_batch=1, global_batch=2048, precision="bf16"),
                      moe=dict(backend=backend, distribution="uniform",
                               **({"microbatch_overlap": True} if overlap else {}))))


RUNS += [
    _qwen("zoo_qwen3_235b_deepep_ep32", "DeepEP TP2 EP32 PP8 VPP4 DP16, norm+act recompute, moe_dev(f3e6c5)",
          2, 32, 8, 4, 16, 1, "selective: layernorm + moe_act", "deepep_normal", 19.7, 245, [2] + [3] * 30 + [2]),
    _qwen("zoo_qwen3_235b_deepep_ep32_overlap", "DeepEP TP2 EP32 PP8 VPP4 DP16, norm+act recompute, +1f1b overlap, "
          "moe_dev(f3e6c5)", 2, 32, 8, 4, 16, 1, "selective: layernorm + moe_act", "deepep_normal", 17.6, 276,
          [2] + [3] * 30 + [2], overlap=True),
    _qwen("zoo_qwen3_235b_a2a_pp32", "A2A TP2 EP8 PP32 VPP3 DP4, norm+act recompute, main(1e057005)",
          2, 8, 32, 3, 4, 1, "selective: layernorm + moe_act", "nccl", 24.2, 200, [0] + [1] * 94 + [0]),
    _qwen("zoo_qwen3_235b_tp4_norecompute", "DeepEP TP4 EP8 PP8 VPP4 DP8 EDP4, no recompute, main(1e057005)",
          4, 8, 8, 4, 8, 4, "none", "deepep_normal", 29.0, 167, [2] + [3] * 30 + [2]),
]

# The same README's other H100 rows, joined in session 7 (before any prediction was made for them): the intra-node
# EP row with Megatron's FSDP, and the long-context table (TFLOP/s only, converted with Megatron's FLOP formula).
# Megatron num_floating_point_operations for Qwen3-235B at main(1e057005) and main at 2026-03 (0e19bf1: the same
# sum written per projection), per token: 6 [h (q + 2 kv) + q s + q h] per attention layer (q = 64 x 128, kv =
# 4 x 128, causal: half the s x s scores) + 12 h (f_e k 3/2) per MoE layer + 6 h V logits.
def _qwen3_flops_per_token(seq: int) -> float:
    h, q, kv, layers, f_e, k, vocab = 4096, 64 * 128, 4 * 128, 94, 1536, 8, 151936
    attention = 6 * (h * (q + 2 * kv) + q * seq + q * h)
    return layers * (attention + 12 * h * f_e * k * 1.5) + 6 * h * vocab


QLONG = "best_practice/qwen3/readme.md (Performance Results, H100, Long Context table; added at 38ce2ed, 2026-03-10)"
# the FLOP count of the 4K rows reproduces their step times from their TFLOP/s within 0.5% (245 TF x 256 x 19.7 s)


def _qwen_long(seq, cp, tflops):
    dp = 256 // (4 * cp * 8)
    step = 256 * seq * _qwen3_flops_per_token(seq) / (tflops * 1e12 * 256)
    id = f"zoo_qwen3_235b_h100_{seq // 1024}k_cp{cp}"
    run = _qwen(id, f"H100 {seq} tokens, TP4 CP{cp}, forced balance", 4, 8, 8, 4, dp, 4, "layernorm + moe",
                "deepep_normal", round(step, 3), tflops, [2] + [3] * 30 + [2],
                extra_unsaid=(";tp_comm_overlap=true (sbatch_benchmarking.sh at 38ce2ed adds --tp-comm-overlap for "
                              "PR=bf16);micro_batch=1 (runtime.conf);code version not stated (main at 2026-03 assumed: "
                              "fused permute and TE cross entropy from the model config)"),
                cp=cp, tp_comm_overlap=True)
    run.update(source_locator=f"{QLONG}; its command line (PP8 VPP4 EP8, --recompute-modules layernorm moe); "
                              "sbatch_benchmarking.sh; runtime_configs/benchmarking/runtime.conf",
               seq_len=seq, global_batch=256, cp=cp, measured_quantity="tflops_per_gpu_causal", measured_value=tflops,
               recompute="selective: layernorm + moe",
               notes=(f"{tflops} TFLOP/s per GPU with --moe-router-force-load-balancing ('forced balance'; the dropless "
                      f"number is not used); Megatron FLOP formula {_qwen3_flops_per_token(seq):.4e} FLOP per token -> "
                      f"step = 256 x {seq} x FLOP/token / ({tflops}e12 x 256) = {step:.3f} s. Recompute 'moe' "
                      "re-runs the whole MoE layer (Megatron --recompute-modules moe)."),
               measured_step_s=step,
               yaml_comment=(f"{id}: Qwen3-235B-A22B on 256 H100, seq {seq}, TP4 CP{cp} EP8 PP8 VPP4 DP{dp}, GBS 256, "
                             f"BF16.\nSource: {ZOO} {QLONG}.\nMeasured: {tflops} TFLOP/s/GPU (forced balance) = "
                             f"{step:.3f} s per step (Megatron FLOP formula)."))
    run["scenario"]["training"].update(seq_len=seq, global_batch=256)
    run["scenario"]["model"]["max_position"] = seq
    run["scenario"]["parallel"].update(recompute_modules=["layernorm", "moe"])
    return run


_FSDP = _qwen("zoo_qwen3_235b_fsdp_ep8", "DeepEP TP2 EP8 PP1 EDP32 DP128 FSDP On, MBS4, full recompute, main(1e057005)",
              2, 8, 1, 1, 128, 32, "full", "deepep_normal", 17.6, 276, None,
              extra_unsaid=(";FSDP = Megatron custom FSDP (--use-custom-fsdp), sharding optim_grads_params (ZeRO-3: the "
                            "only strategy whose parameters fit, 28.5B expert parameters per GPU unsharded = 53 GiB "
                            "in bf16; the row does not name it)"))
_FSDP["scenario"]["parallel"] = dict(tp=2, pp=1, ep=8, etp=1, dp=128, sp=True, recompute="full", zero=3)
_FSDP["scenario"]["training"].update(micro_batch=4)
_FSDP.update(micro_batch=4, vpp=1, zero_or_distopt="Megatron custom FSDP (ZeRO-3, optim_grads_params assumed)",
             notes=_FSDP["notes"] + " 'disable log para norm' in the row's notes: --log-params-norm off.")
RUNS += [_qwen_long(16384, 1, 295), _qwen_long(32768, 2, 335), _qwen_long(65536, 4, 368),
         _qwen_long(131072, 8, 389), _FSDP]

# FlagPerf's two NVIDIA MoE cases (same repository and README format as the Llama-3 rows above), joined unseen in
# session 5: Mixtral 8x7B on 4 DGX H100 and a Qwen1.5-style 8-expert model on one DGX A800.
_MIXR = "training/nvidia/mixtral_8x7B-megatron/README.md"
_MIX_STEP = 1200 * 4096 / (2844.0 * 32)
_QWR = "training/nvidia/qwen1.5_MoE-megatron/README.md"
_QW_STEP = 512 * 8192 / (7450.7 * 8)
RUNS += [
    dict(id="flagperf_mixtral8x7b_h100_32", group="moe", source=f"FlagPerf (BAAI) NVIDIA Megatron-Core case, {FLAG}",
         source_locator=(f"{_MIXR} (性能指标 table: H100 4x8, bf16, PP2DP2EP1TP8, 2844.0 token/p/s, mem 75/80); "
                         "training/nvidia/mixtral_8x7B-megatron/config/config_H100x4x8.py (localbs 3, TP8, PP2); "
                         "training/benchmarks/mixtral_8x7B/megatron/megatron_main.sh"),
         gpu="H100-SXM5-80GB", gpus=32, nodes=4, model="mixtral-8x7b", params_B=46.7, seq_len=4096,
         global_batch=1200, micro_batch=3, tp=8, pp=2, vpp=1, cp=1, ep=1, dp=2, sp="yes",
         zero_or_distopt="distopt (--use-distributed-optimizer)", recompute="selective (--recompute-activations)",
         precision="bf16", **_flagperf_measured(2844.0, 32, 1200, 4096, 75),
         unsaid=("ep=1 (the README's PP2DP2EP1TP8; megatron_main.sh passes --expert-model-parallel-size 8, which "
                 "core_v0.6 refuses with data-parallel size 2);etp=8 (core_v0.6 shards every expert over the TP "
                 "group);routing=uniform (aux-loss balancing, balance not reported);token dispatcher=allgather "
                 "(core_v0.6 default; no EP traffic at EP 1);overlap_grad_reduce=false;overlap_param_gather=false "
                 "(not passed);memory = nvidia-smi GB used (reported 75/80), converted to GiB"),
         notes=(f"Benchmark run (100 steps), token/p/s = 2844.0 per GPU; step = GBS*seq/tokens_per_s = {_MIX_STEP:.2f} s. "
                "Megatron-Core core_v0.6.0, TE, --use-flash-attn ('flash attention 2' in the README's optimisation "
                "list: attention_kernel flash2), --moe-grouped-gemm (the grouped_gemm package's one grouped kernel), "
                "--sequence-parallel. MFU 20.7% (PaLM definition) in the README. On Hopper the grouped_gemm package "
                "runs one cuBLAS GEMM per expert (fanshiqing/grouped_gemm csrc/grouped_gemm.cu: its CUTLASS kernel "
                "is built for sm80 only). permute gather_scatter: core_v0.6's MoEAllGatherTokenDispatcher "
                "(torch.gather / scatter / scatter_add, token_dispatcher.py); cross_entropy unfused: core_v0.6 "
                "has no loss fusion (vocab_parallel_cross_entropy(logits.float()))."),
         yaml_comment=(f"flagperf_mixtral8x7b_h100_32: FlagPerf Mixtral 8x7B Megatron-Core on 32 H100, TP8 PP2 DP2 EP1, "
                       f"MBS 3, GBS 1200, seq 4096.\nSource: {FLAG} {_MIXR}.\n"
                       f"Measured: 2844.0 tokens/s per GPU ({_MIX_STEP:.2f} s per step), memory 75/80 GB."),
         scenario=dict(name="flagperf_mixtral8x7b_h100_32", system=dict(profile="dgx_h100", nodes=4),
                       model=dict(preset="mixtral-8x7b"),
                       parallel=dict(tp=8, pp=2, dp=2, ep=1, etp=8, sp=True, recompute="selective",
                                     distributed_optimizer=True),
                       training=dict(seq_len=4096, micro_batch=3, global_batch=1200, precision="bf16",
                                     attention_kernel="flash2", cross_entropy="unfused",
                                    framework="megatron_core_te"),
                       moe=dict(distribution="uniform", permute="gather_scatter"))),
    dict(id="flagperf_qwen15moe_a800_8", group="moe", source=f"FlagPerf (BAAI) NVIDIA Megatron case, {FLAG}",
         source_locator=(f"{_QWR} (性能指标 table: A800 1x8, bf16, TP1PP2DP4, 7450.7 token/p/s, mem 66/80); "
                         "training/nvidia/qwen1.5_MoE-megatron/config/config_A800x1x8.py (batchsize 1, gbs 512, "
                         "seqlength 8192); training/benchmarks/qwen1.5_MoE/megatron/megatron_pai_main.sh"),
         gpu="A800-SXM4-80GB", gpus=8, nodes=1,
         model="Qwen1.5-style MoE of the FlagPerf script (24L h2048, 16 heads, 8 experts top-2, expert FFN 5504)",
         params_B=7.5, seq_len=8192, global_batch=512, micro_batch=1, tp=1, pp=2, vpp=1, cp=1, ep=1, dp=4, sp="no",
         zero_or_distopt="distopt (--use-distributed-optimizer)", recompute="selective (--recompute-activations)",
         precision="bf16", **_flagperf_measured(7450.7, 8, 512, 8192, 66),
         unsaid=("routing=uniform (aux-loss balancing, balance not reported);experts run one by one (no "
                 "--moe-grouped-gemm: Megatron's SequentialMLP);token dispatcher=allgather (default; no EP "
                 "traffic at EP 1);Q/K/V bias (--add-qkv-bias) not modelled (0.03% of the parameters);"
                 "overlap_grad_reduce=false (not passed);memory = nvidia-smi GB used (reported 66/80)"),
         notes=(f"Benchmark run (100 steps), token/p/s = 7450.7 per GPU; step = {_QW_STEP:.2f} s. Pai-Megatron-Patch on "
                "Megatron-LM-240405, TE, --use-flash-attn ('flash attention 2': attention_kernel flash2). The model is "
                "what the script builds (num-experts 8, topk 2, ffn 5504, vocab 151643 + 293 extra = 151936), not "
                "the released Qwen1.5-MoE-A2.7B (60 experts + shared expert). Megatron-LM-240405 (main on 2024-04-05, "
                "d0f1307) matches core_v0.6.0 in the MoE and loss code: permute gather_scatter (all-gather "
                "dispatcher), experts sequential (SequentialMLP: no --moe-grouped-gemm), cross_entropy unfused."),
         yaml_comment=(f"flagperf_qwen15moe_a800_8: FlagPerf Qwen1.5-style 8-expert MoE (Pai-Megatron-Patch) on 8 A800, "
                       f"TP1 PP2 DP4, MBS 1, GBS 512, seq 8192.\nSource: {FLAG} {_QWR}.\n"
                       f"Measured: 7450.7 tokens/s per GPU ({_QW_STEP:.2f} s per step), memory 66/80 GB."),
         scenario=dict(name="flagperf_qwen15moe_a800_8", system=dict(profile="dgx_a800_80gb", nodes=1),
                       model=dict(name="flagperf-qwen1.5-moe-8e", layers=24, hidden=2048, heads=16, kv_heads=16,
                                  ffn_hidden=5504, vocab=151936, activation="swiglu", norm="rmsnorm",
                                  position_embedding="rope", max_position=8192, tied_embeddings=False,
                                  moe=dict(experts=8, top_k=2, expert_ffn_hidden=5504)),
                       parallel=dict(tp=1, pp=2, dp=4, ep=1, recompute="selective", distributed_optimizer=True),
                       training=dict(seq_len=8192, micro_batch=1, global_batch=512, precision="bf16",
                                     attention_kernel="flash2", cross_entropy="unfused",
                                    framework="megatron_core_te"),
                       moe=dict(distribution="uniform", permute="gather_scatter", experts="sequential"))),
]
