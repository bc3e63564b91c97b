"""Published training runs of the development set (see README.md). Each entry: runs.csv columns, the scenario the
YAML is written from, and `measured_step_s` = the measured quantity expressed as seconds per optimizer step with
the source's own conversion (step time as logged; tokens/s: global_batch * seq_len / tokens_per_s; TFLOP/s per GPU:
the source's FLOP formula / (TFLOP/s x GPUs))."""

V31 = "mlcommons/training_results_v3.1@d06288b2bd675a9d88e0e6181f5bb5626b71ec19"
V40 = "mlcommons/training_results_v4.0@6fe954378efe4a1a1bd665550b18ff8f26018def"
V41 = "mlcommons/training_results_v4.1@b87b9e396f771345d4ef122ba33456304f15228d"
V50 = "mlcommons/training_results_v5.0@0fdc28f013256aea84fa36fdaf1e0fa46094b18c"
ZOO = "yanring/Megatron-MoE-ModelZoo@e8650517d60d71ab73fc6b3b0388cac4ba435181"
FLAG = "FlagOpen/FlagPerf@1b5a030398ab719e406f77877eb34c9599b17fd2"
BIGS = "bigscience-workshop/bigscience@9e64edec2ad1fb9263bf39ba616a84ff64b4d947"
MCORE_MOE = "NVIDIA/Megatron-LM@0b4c4cfced47cffad4cec8c4047986bfa60e7f10:megatron/core/transformer/moe/README.md"
MTNLG = ("Smith et al. 2022, Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B (arXiv:2201.11990) "
         "Sec. 2.4, as quoted in cli99/llm-analysis examples/megatron-turing-nlg/README.md")

HEADER = """# Published LLM training runs for validating the step-time / memory model (development set).
# Compiled 2026-12-01 (branch devset). Sources:
#   MLPerf Training v3.1 / v4.0 / v4.1 / v5.0 closed-division result logs and NVIDIA NeMo config_*.sh:
#     github.com/mlcommons/training_results_v3.1 @d06288b, _v4.0 @6fe9543, _v4.1 @b87b9e3, _v5.0 @0fdc28f
#     (step time = median over the 3 submitted runs of the median block or train_step_time; see README.md)
#   Megatron-Core MoE README (NVIDIA/Megatron-LM @0b4c4cf megatron/core/transformer/moe/README.md)
#   Megatron MoE model zoo best practices (github.com/yanring/Megatron-MoE-ModelZoo @e865051 best_practice/qwen3/readme.md)
#   FlagPerf (github.com/FlagOpen/FlagPerf @1b5a030 training/nvidia/*-megatron/README.md + config/ + training/benchmarks/)
#   BigScience BLOOM-176B (github.com/bigscience-workshop/bigscience @9e64ede train/tr11-176B-ml/README.md, chronicles.md)
#   MT-NLG 530B (Smith et al. 2022, arXiv:2201.11990, Sec. 2.4; numbers as quoted by cli99/llm-analysis)
# Not used (held back): Llama 3 paper, MegaScale, Narayanan et al. 2021, DeepSeek-V3 report, torchtitan perf docs,
#   Megatron-LM README perf table, NeMo / Megatron-Bridge performance summaries; Korthikanti et al. 2023 (calibration).
# measured_quantity: step_s = seconds per optimizer step; tokens_per_s = global tokens per second (all GPUs);
#   tflops_per_gpu = model TFLOP/s per GPU as the source defines it (see notes; _causal: Megatron's 2025+ formula,
#   half the s^2 scores). unsaid: knob=assumed value (why).
"""


def _mlperf_gpt3(id, ver, repo, resdir, cfg, nodes, gbs, mbs, tp, pp, vpp, step, extra_unsaid="", extra_notes=""):
    gpus = nodes * 8
    dp = gpus // (tp * pp)
    return dict(
        id=id, group="fp8", source=f"MLPerf Training {ver} closed, NVIDIA (GPT-3 175B benchmark), {repo}",
        source_locator=f"{resdir}/result_*.txt (:::MLLOG block_start/block_stop, global_batch_size); {cfg}",
        gpu="H100-SXM5-80GB", gpus=gpus, nodes=nodes, model="gpt3-175b (MLPerf GPT-3, 96L h12288)", params_B=175,
        seq_len=2048, global_batch=gbs, micro_batch=mbs, tp=tp, pp=pp, vpp=vpp, cp=1, ep=1, dp=dp, sp="yes",
        zero_or_distopt="distopt (USE_DIST_OPTIMIZER=True, FP8_PARAMS=True, conf/optim/distributed_fused_adam.yaml "
                        "grad_sync_dtype: bf16)", recompute="none",
        precision="fp8 (TE delayed scaling HYBRID e4m3/e5m2, amax history 1024, max; fp8 params)",
        measured_quantity="step_s", measured_value=round(step, 3), measured_memory_GiB="", trained="yes",
        unsaid=("overlap_grad_reduce=true;overlap_param_gather=true (NeMo distributed_fused_adam overlap default);"
                "recompute=none (ACT_CKPT_GRANULARITY unset -> null);fabric=fat_tree NDR (Eos, not stated in config)"
                + extra_unsaid),
        notes=("Real convergence run (MLPerf time-to-train from a checkpoint). Step time = block wall time / steps "
               "per block (blocks exclude eval). TP comm overlap via userbuffers (TP_COMM_OVERLAP=True); "
               "NCCL_NVLS_ENABLE=0. Simulator fp8 = fp8 primary weights, no amax/recipe detail." + extra_notes),
        measured_step_s=step,
        yaml_comment=(f"{id}: MLPerf {ver} GPT-3 175B, {gpus} H100 (NVIDIA Eos), FP8.\n"
                      f"Source: {repo} {resdir}; config {cfg}.\nMeasured: {step:.3f} s per step (median of 3 runs)."),
        scenario=dict(name=id, system=dict(profile="dgx_h100", nodes=nodes, nvls=False),
                      model=dict(preset="gpt3-175b"),
                      parallel=dict(tp=tp, pp=pp, vpp=vpp, dp=dp, sp=True, recompute="none",
                                    distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True,
                                    tp_comm_overlap=True),
                      training=dict(seq_len=2048, micro_batch=mbs, global_batch=gbs, precision="fp8",
                                    grad_reduce_dtype="bf16")))


def _mlperf_405b(id, resdir, cfg, nodes, gbs, step):
    gpus = nodes * 8
    dp = gpus // 128
    return dict(
        id=id, group="fp8", source=f"MLPerf Training v5.0 closed, NVIDIA (Llama 3.1 405B benchmark), {V50}",
        source_locator=f"{resdir}/result_*.txt (:::MLLOG tracked_stats train_step_time); {cfg}",
        gpu="H100-SXM5-80GB", gpus=gpus, nodes=nodes, model="llama3-405b (Llama 3.1 405B)", params_B=405,
        seq_len=8192, global_batch=gbs, micro_batch=1, tp=8, pp=8, vpp=8, cp=2, ep=1, dp=dp, sp="yes",
        zero_or_distopt="distopt (USE_DIST_OPTIMIZER=True, FP8_PARAMS=True, overlap grad/param gather=True, "
                        "pretrain.py DistributedDataParallelConfig grad_reduce_in_fp32=False)",
        recompute="none", precision="fp8 (TE delayed scaling, fp8 params)",
        measured_quantity="step_s", measured_value=round(step, 3), measured_memory_GiB="", trained="yes",
        unsaid=("recompute=none (no recompute key in custom.yaml / config);cp_comm=p2p (TE default a2a/p2p not stated);"
                "pipeline_layers=[1,2x62,1] (ASYM_PP_EMBED/ASYM_PP_LOSS: embedding and loss count as one layer each)"),
        notes=("MLPerf convergence run from the Meta checkpoint; step time = median train_step_time over steps 2.. "
               "of each run, median of 3 runs. TP comm overlap, NCCL_NVLS_ENABLE=0. CE loss fusion."),
        measured_step_s=step,
        yaml_comment=(f"{id}: MLPerf v5.0 Llama 3.1 405B, {gpus} H100 (NVIDIA Eos), FP8, TP8 PP8 VPP8 CP2.\n"
                      f"Source: {V50} {resdir}; config {cfg}.\nMeasured: {step:.3f} s per step (median of 3 runs)."),
        scenario=dict(name=id, system=dict(profile="dgx_h100", nodes=nodes, nvls=False),
                      model=dict(preset="llama3-405b"),
                      parallel=dict(tp=8, pp=8, vpp=8, cp=2, dp=dp, sp=True, recompute="none",
                                    distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True,
                                    tp_comm_overlap=True, pipeline_layers=[1] + [2] * 62 + [1]),
                      training=dict(seq_len=8192, micro_batch=1, global_batch=gbs, precision="fp8",
                                    grad_reduce_dtype="bf16")))


N31 = "NVIDIA/benchmarks/gpt3/implementations/pytorch"
RUNS = [
    _mlperf_gpt3("mlperf31_gpt3_h100_512", "v3.1", V31, "NVIDIA/results/eos_n64_ngc23.09_nemo/gpt3",
                 f"{N31}/config_DGXH100_64x8x192x4x8_mbs1.sh + config_common.sh + conf/custom.yaml", 64, 2048, 1, 4, 8,
                 12, 11.0718, extra_unsaid=";vpp=12 (INTERLEAVED_PIPELINE unset -> custom.yaml default 12)"),
    _mlperf_gpt3("mlperf31_gpt3_h100_4096", "v3.1", V31, "NVIDIA/results/eos-dfw_n512_ngc23.09_nemo/gpt3",
                 f"{N31}/config_DGXH100_512x8x16x4x8_mbs1.sh + config_common.sh + conf/custom.yaml", 512, 2048, 1, 4,
                 8, 12, 1.6276, extra_unsaid=";vpp=12 (custom.yaml default)"),
    _mlperf_gpt3("mlperf31_gpt3_h100_10752", "v3.1", V31, "NVIDIA/results/eos-dfw_n1344_ngc23.09_nemo/gpt3",
                 f"{N31}/config_DGXH100_1344x8x8x4x8_mbs1.sh + config_common.sh + conf/custom.yaml", 1344, 2688, 1, 4,
                 8, 12, 0.9518, extra_unsaid=";vpp=12 (custom.yaml default)"),
    _mlperf_gpt3("mlperf40_gpt3_h100_512", "v4.0", V40, "NVIDIA/results/eos_n64_ngc24.04_nemo/gpt3",
                 "NVIDIA/benchmarks/gpt3/implementations/nemo/config_DGXH100_64x8x128x4x8_mbs2.sh + config_common.sh",
                 64, 2304, 2, 4, 8, 4, 10.9822,
                 extra_notes=" Log says global_batch_size 2304 (MINIBS overridden to 144 at launch; GA 72)."),
    _mlperf_gpt3("mlperf40_gpt3_h100_11616", "v4.0", V40, "NVIDIA/results/eos-dfw_n1452_ngc24.04_nemo/gpt3",
                 "NVIDIA/benchmarks/gpt3/implementations/nemo/config_DGXH100_1452x8x6x4x6_mbs1_cg.sh + config_common.sh",
                 1452, 2904, 1, 4, 6, 8, 0.9214,
                 extra_notes=" Per-layer CUDA graphs (LAYER_CUDA_GRAPH=1), FP8 reduce-scatter overlap; GA 6."),
    _mlperf_gpt3("mlperf41_gpt3_h100_256", "v4.1", V41, "NVIDIA/results/eos_n32_ngc24.09_nemo/gpt3",
                 "NVIDIA/benchmarks/gpt3/implementations/eos_n32_ngc24.09_nemo/config_DGXH100_32x8x256x4x8_mbs2.sh",
                 32, 2048, 2, 4, 8, 6, 18.4073,
                 extra_notes=" DEFER_EMBEDDING_WGRAD_COMPUTE=True; GA 128."),
    _mlperf_gpt3("mlperf41_gpt3_h100_512", "v4.1", V41, "NVIDIA/results/eos_n64_ngc24.09_nemo/gpt3",
                 "NVIDIA/benchmarks/gpt3/implementations/eos_n64_ngc24.09_nemo/config_DGXH100_64x8x128x4x8_mbs2.sh",
                 64, 2048, 2, 4, 8, 6, 9.5403,
                 extra_notes=" Same 512 GPUs as mlperf31_gpt3_h100_512 a year later (NeMo 24.09): 14% faster."),
    _mlperf_405b("mlperf50_llama405b_h100_512", "NVIDIA/results/eos-dfw_n64_ngc25.01_nemo/llama31_405b",
                 "NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n64_ngc25.01_nemo/config_DGXH100_64x8x288xtp8pp8cp2.sh",
                 64, 1152, 55.143),
    _mlperf_405b("mlperf50_llama405b_h100_2048", "NVIDIA/results/eos-dfw_n256_ngc25.01_nemo/llama31_405b",
                 "NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n256_ngc25.01_nemo/config_DGXH100_256x8x72xtp8pp8cp2.sh",
                 256, 1152, 14.222),
    _mlperf_405b("mlperf50_llama405b_h100_8192", "NVIDIA/results/eos-dfw_n1024_ngc25.01_nemo/llama31_405b",
                 "NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n1024_ngc25.01_nemo/config_DGXH100_1024x8x24xtp8pp8cp2.sh",
                 1024, 1536, 5.180),
]


def _mtnlg(id, nodes, step, tflops):
    gpus = nodes * 8
    dp = gpus // 280
    return dict(
        id=id, group="dense", source=MTNLG, source_locator="Sec. 2.4 (system throughput paragraph)",
        gpu="A100-SXM4-80GB", gpus=gpus, nodes=nodes, model="MT-NLG 530B (105L h20480 128 heads)", params_B=530,
        seq_len=2048, global_batch=1920, micro_batch=1, tp=8, pp=35, vpp=1, cp=1, ep=1, dp=dp, sp="no",
        zero_or_distopt="ZeRO (stage not stated; assumed 1)", recompute="full (assumed)", precision="fp16 mixed (assumed)",
        measured_quantity="step_s", measured_value=step, measured_memory_GiB="", trained="yes",
        unsaid=("micro_batch=1 (not stated in the quote);zero=1 (DeepSpeed ZeRO stage not stated);"
                "recompute=full (DeepSpeed/Megatron 2021 activation checkpointing default for 530B);"
                "precision=fp16 (mixed precision, dtype not stated);schedule=1f1b non-interleaved;"
                "overlap_grad_reduce=false (DeepSpeed ZeRO-1 2021: after backward);vocab=50257 (GPT-2 BPE);"
                "grad_accumulation=fused (how DeepSpeed's 2021 fp16 ZeRO-1 optimizer accumulated is not stated)"),
        notes=(f"Reported {tflops} TFLOP/s per GPU (Narayanan formula, counts recompute). llm-analysis quotes 8x "
               "A100-SXM 40GB per node; Microsoft/NVIDIA blog says Selene DGX A100 80GB; we use 80GB. "
               "Model = Korthikanti 530B preset (same shape) with vocab 50257. attention unfused: the run predates "
               "FlashAttention (Dao et al., arXiv:2205.14135, May 2022); Megatron's fused scale-mask-softmax between "
               "two batched GEMMs. cross_entropy unfused: Megatron-DeepSpeed's mpu/cross_entropy.py (max, sub_, "
               "exp, sum, div_ on output.float())."),
        measured_step_s=step,
        yaml_comment=(f"{id}: MT-NLG 530B on {nodes} DGX A100 ({gpus} GPUs), TP8 x PP35 x DP{dp}, GBS 1920.\n"
                      f"Source: {MTNLG}.\nMeasured: {step} s per iteration ({tflops} TFLOP/s/GPU)."),
        scenario=dict(name=id, system=dict(profile="dgx_a100_80gb", nodes=nodes),
                      model=dict(preset="korthikanti-530b", vocab=50257),
                      parallel=dict(tp=8, pp=35, dp=dp, sp=False, recompute="full", zero=1),
                      training=dict(seq_len=2048, micro_batch=1, global_batch=1920, precision="fp16",
                                    attention="unfused", cross_entropy="unfused")))


RUNS += [_mtnlg("mtnlg_530b_a100_2240", 280, 60.1, 126), _mtnlg("mtnlg_530b_a100_2800", 350, 50.2, 121),
         _mtnlg("mtnlg_530b_a100_3360", 420, 44.4, 113)]

RUNS.append(dict(
    id="bloom_176b_a100_384", group="dense",
    source=f"BigScience BLOOM-176B training README and chronicles, {BIGS}",
    source_locator=("train/tr11-176B-ml/README.md (Replica setup TP4 PP12 DP8 MBS2; GBS 2048; line 129 pp-partition-"
                    "method; line 366 activation checkpointing; line 437 BF16_Optimizer = ZeRO-1); chronicles.md line 45 "
                    "(iteration 12695: elapsed time per iteration 105.22 s, 149.02 TFLOPs)"),
    gpu="A100-SXM4-80GB", gpus=384, nodes=48, model="BLOOM 176B (70L h14336 112 heads, vocab 250880, ALiBi)",
    params_B=176, seq_len=2048, global_batch=2048, micro_batch=2, tp=4, pp=12, vpp=1, cp=1, ep=1, dp=8, sp="no",
    zero_or_distopt="ZeRO-1 (DeepSpeed BF16_Optimizer)", recompute="full", precision="bf16",
    measured_quantity="step_s", measured_value=105.22, measured_memory_GiB="", trained="yes",
    unsaid=("schedule=1f1b (DeepSpeed pipeline engine);overlap_grad_reduce=false (BF16_Optimizer);"
            "pipeline_layers=[5,6x10,5] (tied embeddings count as layers: 72/12);node=jean_zay_a100_80gb (4x100 "
            "Gb/s Omni-Path per node from the README; NVSwitch baseboard, one adapter per GPU pair and the CPU "
            "model assumed)"),
    notes=("Megatron-DeepSpeed. TFLOPs in the log are hardware TFLOPs (4x2 coefficient, counting recompute). "
           "ALiBi modelled as rope (no position parameters either way); embedding LayerNorm not modelled. "
           "attention unfused: training began 2022-03-11, before FlashAttention (arXiv:2205.14135, May 2022); "
           "grad_accumulation separate_fp32: DeepSpeed's pipeline engine calls BF16_Optimizer.update_hp_grads "
           "after every micro-batch's backward (deepspeed/runtime/pipe/engine.py _exec_backward_pass; "
           "deepspeed/runtime/bf16_optimizer.py: hp_grad.add_(lp.grad.to(fp32))). cross_entropy unfused: "
           "bigscience-workshop/Megatron-DeepSpeed megatron/mpu/cross_entropy.py (max, sub_, exp, sum, div_ on "
           "output.float(); its in-place subtract keeps one fp32 copy, 4 B per logit less transient memory than "
           "core_v0.6's, which the model prices)."),
    measured_step_s=105.22,
    yaml_comment=("bloom_176b_a100_384: BLOOM-176B on Jean Zay, 48 nodes x 8 A100 80GB, TP4 PP12 DP8, MBS 2, GBS 2048.\n"
                  f"Source: {BIGS} train/tr11-176B-ml/README.md, chronicles.md line 45.\n"
                  "Measured: 105.22 s per iteration (149.02 hardware TFLOP/s per GPU)."),
    scenario=dict(name="bloom_176b_a100_384", system=dict(profile="jean_zay_a100_80gb", nodes=48),
                  model=dict(name="bloom-176b", layers=70, hidden=14336, heads=112, vocab=250880, activation="gelu",
                             norm="layernorm", linear_bias=True, tied_embeddings=True, position_embedding="rope",
                             max_position=2048),
                  parallel=dict(tp=4, pp=12, dp=8, sp=False, recompute="full", zero=1,
                                pipeline_layers=[5] + [6] * 10 + [5]),
                  training=dict(seq_len=2048, micro_batch=2, global_batch=2048, precision="bf16",
                                attention="unfused", grad_accumulation="separate_fp32", cross_entropy="unfused"))))


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
                                    attention_kernel="flash2", cross_entropy="unfused")))


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
# and has no time; docs/validation.md states what the model predicts for it.
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
                                     attention_kernel="flash2", cross_entropy="unfused"),
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
                                     attention_kernel="flash2", cross_entropy="unfused"),
                       moe=dict(distribution="uniform", permute="gather_scatter", experts="sequential"))),
]
