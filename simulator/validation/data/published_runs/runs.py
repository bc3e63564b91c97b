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
                                    grad_reduce_dtype="bf16", framework="nemo")))


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
                                    grad_reduce_dtype="bf16", framework="nemo")))


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
               "exp, sum, div_ on output.float()). framework deepspeed: DeepSpeed's PipelineEngine (separate "
               "blocking receives); grad_accumulation fused, as the unsaid knob says (BF16_Optimizer's fp32 "
               "accumulation, the profile's default, is bf16-only)."),
        measured_step_s=step,
        yaml_comment=(f"{id}: MT-NLG 530B on {nodes} DGX A100 ({gpus} GPUs), TP8 x PP35 x DP{dp}, GBS 1920.\n"
                      f"Source: {MTNLG}.\nMeasured: {step} s per iteration ({tflops} TFLOP/s/GPU)."),
        scenario=dict(name=id, system=dict(profile="dgx_a100_80gb", nodes=nodes),
                      model=dict(preset="korthikanti-530b", vocab=50257),
                      parallel=dict(tp=8, pp=35, dp=dp, sp=False, recompute="full", zero=1),
                      training=dict(seq_len=2048, micro_batch=1, global_batch=1920, precision="fp16",
                                    attention="unfused", cross_entropy="unfused", framework="deepspeed",
                                    grad_accumulation="fused")))


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
           "dropout 0.1: README.md lines 308-312 (the default Megatron-LM --attention-dropout and --hidden-dropout "
           "0.1 are inherited; the slurm script sets neither). "
           "ALiBi (slurm --position-embedding-type alibi): Megatron-DeepSpeed's baddbmm of the bias into the "
           "scores (megatron/model/transformer.py@affff3d2), no position parameters; embedding LayerNorm not "
           "modelled. "
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
                             norm="layernorm", linear_bias=True, tied_embeddings=True, position_embedding="alibi",
                             max_position=2048, dropout=0.1),
                  parallel=dict(tp=4, pp=12, dp=8, sp=False, recompute="full", zero=1,
                                pipeline_layers=[5] + [6] * 10 + [5]),
                  training=dict(seq_len=2048, micro_batch=2, global_batch=2048, precision="bf16",
                                attention="unfused", grad_accumulation="separate_fp32", cross_entropy="unfused",
                                framework="deepspeed"))))
