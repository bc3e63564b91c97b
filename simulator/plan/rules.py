"""The individual cross-field rules :func:`simulator.plan.resolve_plan` applies, each raising a located UserError.

Sources: Megatron-LM ``arguments.py`` / ``parallel_state.py`` (world size, heads % tp, sp needs tp, MoE with TP
needs SP, layers % (pp*vpp), megatron-FSDP needs the distributed optimizer), Megatron-Core context parallelism
(2*cp head-tail chunks), DeepSpeed-Ulysses (heads per rank % ulysses).
"""

from __future__ import annotations

import itertools

from simulator.caching import memo
from simulator.errors import UserError
from simulator.model.spec import ModelSpec
from simulator.plan.config import ParallelPlan, TrainingConfig
from simulator.plan.offload import check_offload
from simulator.plan.recipe import PRECISIONS
from simulator.plan.schedules import schedule_named

_ORDER_DIMS = ("tp", "cp", "ep", "dp", "pp")


def _err(message: str, key: str) -> UserError:
    return UserError(message, key_path=key)


def check_switches(p: ParallelPlan, t: TrainingConfig) -> None:
    """Switches that need another switch: sp/tp, megatron_fsdp/distributed_optimizer, zero vs Megatron sharding,
    vpp/pp/schedule (with the schedule's own rules, :meth:`simulator.plan.schedules.Schedule.check_plan`),
    framework-specific features."""
    check_training_switches(p, t)
    if p.sp and p.tp == 1:
        raise _err("sp (sequence parallelism) needs tp > 1, got tp = 1", "parallel.sp")
    if p.megatron_fsdp is not None and not p.distributed_optimizer:
        raise _err(f"megatron_fsdp ({p.megatron_fsdp}) needs distributed_optimizer: true "
                   "(Megatron-FSDP runs only with the distributed optimizer)", "parallel.megatron_fsdp")
    if p.zero and (p.distributed_optimizer or p.megatron_fsdp):
        raise _err(f"zero ({p.zero}) and distributed_optimizer ({p.distributed_optimizer}) / megatron_fsdp "
                   f"({p.megatron_fsdp}) both shard the optimizer; choose one", "parallel.zero")
    if t.family == "pytorch" and p.distributed_optimizer:
        raise _err("distributed_optimizer is a Megatron feature; with framework pytorch use zero (1-3, FSDP)",
                   "parallel.distributed_optimizer")
    if p.recompute_layers is not None and p.recompute != "full":
        raise _err(f"recompute_layers ({p.recompute_layers}) needs recompute: full (got {p.recompute!r}); it is "
                   "Megatron's --recompute-method block --recompute-num-layers", "parallel.recompute_layers")
    if p.recompute_modules is not None and p.recompute != "selective":
        raise _err(f"recompute_modules {list(p.recompute_modules)} need recompute: selective (got {p.recompute!r}); "
                   "Megatron reads --recompute-modules only with --recompute-granularity selective",
                   "parallel.recompute_modules")
    if p.recompute_modules is not None and len(set(p.recompute_modules)) != len(p.recompute_modules):
        raise _err(f"recompute_modules {list(p.recompute_modules)} names a module twice", "parallel.recompute_modules")
    schedule = schedule_named(p.schedule)
    schedule.check_plan(p, t)      # its own rules (the split-backward schedules: simulator.plan.schedules.split)
    if p.vpp > 1 and p.pp == 1:
        raise _err(f"vpp ({p.vpp}) > 1 needs pp > 1, got pp = 1", "parallel.vpp")
    if p.vpp > 1 and not schedule.interleaves:
        raise _err(f"vpp ({p.vpp}) > 1 is the interleaved 1F1B schedule; schedule {p.schedule!r} cannot interleave",
                   "parallel.schedule")


def _megatron_with_master(t: TrainingConfig) -> bool:
    """Megatron with a mixed precision that keeps an fp32 master copy and fp32 main gradients."""
    return t.family == "megatron" and PRECISIONS[t.precision].main > 0


def check_training_switches(p: ParallelPlan, t: TrainingConfig) -> None:
    """Framework switches of ``training:`` that hold only for some frameworks, precisions or attention kernels."""
    if t.grad_reduce_dtype is not None and (not _megatron_with_master(t) or p.zero):
        raise _err(f"grad_reduce_dtype ({t.grad_reduce_dtype}) sets Megatron's main-gradient buffer: it needs "
                   f"framework megatron (got {t.framework}), zero 0 (got {p.zero}) and a mixed precision with a "
                   f"master copy: bf16, fp16, fp8 or fp4 (got {t.precision})", "training.grad_reduce_dtype")
    if t.attention_kernel == "flash2" and (t.attention != "flash" or t.family != "megatron"):
        raise _err(f"attention_kernel flash2 names the kernel of fused attention: it needs attention flash (got "
                   f"{t.attention}) and framework megatron (got {t.framework}; plain PyTorch runs "
                   "F.scaled_dot_product_attention at its measured rate)", "training.attention_kernel")
    if t.cross_entropy is not None and t.family != "megatron":
        raise _err(f"cross_entropy ({t.cross_entropy}) picks Megatron's loss implementation: it needs framework "
                   f"megatron (got {t.framework}; plain PyTorch's F.cross_entropy is priced as measured)",
                   "training.cross_entropy")
    if t.grad_accumulation == "separate_fp32" and not _megatron_with_master(t):
        raise _err(f"grad_accumulation separate_fp32 adds 16-bit gradients into an fp32 buffer: it needs framework "
                   f"megatron (got {t.framework}; plain PyTorch's accumulation is modelled with framework pytorch) "
                   f"and a mixed precision with a master copy: bf16, fp16, fp8 or fp4 (got {t.precision})",
                   "training.grad_accumulation")
    check_memory_switches(p, t)


def check_memory_switches(p: ParallelPlan, t: TrainingConfig) -> None:
    """Memory lifetimes and savings of one framework (docs/memory_features.md): each key needs the framework whose flag it is
    and the settings that flag works with."""
    if t.gradient_lifetime == "per_layer" and (t.family != "pytorch" or not t.grad_set_to_none):
        raise _err(f"gradient_lifetime per_layer: gradients created layer by layer in backward (PyTorch "
                   f"zero_grad(set_to_none=True)); it needs framework pytorch (got {t.framework}) and "
                   f"grad_set_to_none true (got {t.grad_set_to_none}); Megatron keeps a persistent gradient buffer",
                   "training.gradient_lifetime")
    if t.loss_implementation is not None and t.family != "pytorch":
        raise _err(f"loss_implementation ({t.loss_implementation}) names a plain-PyTorch / Hugging Face loss: it "
                   f"needs framework pytorch (got {t.framework}; Megatron's loss is training.cross_entropy)",
                   "training.loss_implementation")
    if p.cpu_offloading_num_layers:
        _check_cpu_offloading(p, t)
    check_offload(p, t)
    if p.selective_ac_option is not None and t.family != "pytorch":
        raise _err(f"selective_ac_option {p.selective_ac_option} is torchtitan's: it needs framework pytorch (got "
                   f"{t.framework}; Megatron's selective recompute is recompute_modules)", "parallel.selective_ac_option")
    if not p.deallocate_pipeline_outputs and t.family != "megatron":
        raise _err("deallocate_pipeline_outputs false keeps Megatron's stage outputs until backward: it needs "
                   f"framework megatron (got {t.framework})", "parallel.deallocate_pipeline_outputs")
    for key in ("exp_avg_dtype", "exp_avg_sq_dtype"):
        if getattr(t, key) is not None and t.optimizer != "adam":
            raise _err(f"{key} ({getattr(t, key)}) sets an Adam moment's storage dtype: it needs optimizer adam (got "
                       f"{t.optimizer})", f"training.{key}")
    if t.store_param_remainders and (t.family != "megatron" or t.precision != "bf16" or t.exp_avg_dtype is None
                                     or t.exp_avg_sq_dtype is None):
        raise _err("store_param_remainders keeps the 16 low bits of Megatron's fp32 master copy beside bf16 "
                   f"weights in the precision-aware optimizer: it needs framework megatron (got {t.framework}), "
                   f"precision bf16 (got {t.precision}) and exp_avg_dtype and exp_avg_sq_dtype set (got "
                   f"{t.exp_avg_dtype}, {t.exp_avg_sq_dtype})", "training.store_param_remainders")


def _check_cpu_offloading(p: ParallelPlan, t: TrainingConfig) -> None:
    """Megatron-Core TransformerConfig.__post_init__ (NVIDIA/Megatron-LM megatron/core/transformer/
    transformer_config.py at d98e8a64): CPU offloading only without pipeline parallelism and recomputation."""
    n = p.cpu_offloading_num_layers
    if t.family != "megatron":
        raise _err(f"cpu_offloading_num_layers ({n}) is Megatron's --cpu-offloading-num-layers (Transformer Engine "
                   f"CPU offload): it needs framework megatron (got {t.framework})", "parallel.cpu_offloading_num_layers")
    if p.pp > 1 or p.recompute != "none":
        raise _err(f"cpu_offloading_num_layers ({n}): Megatron-Core has no CPU offloading with pipeline parallelism "
                   f"or activation recomputation (got pp {p.pp}, recompute {p.recompute})",
                   "parallel.cpu_offloading_num_layers")


@memo(maxsize=64)
def parse_order(order: str) -> tuple[str, ...]:
    """Rank order as a tuple, fastest first; ``ulysses`` is inserted after ``cp`` when not named."""
    dims = tuple(x.strip() for x in order.split("-"))
    allowed = set(_ORDER_DIMS) | {"ulysses"}
    if len(set(dims)) != len(dims) or not set(_ORDER_DIMS) <= set(dims) or not set(dims) <= allowed:
        raise _err(f"order {order!r} must name each of tp, cp, ep, dp, pp once (and optionally ulysses), "
                   "joined by '-', e.g. tp-cp-ep-dp-pp", "parallel.order")
    if "ulysses" not in dims:
        i = dims.index("cp") + 1
        dims = dims[:i] + ("ulysses",) + dims[i:]
    return dims


def data_parallel(gpus: int, *, tp: int = 1, pp: int = 1, cp: int = 1, ulysses: int = 1) -> int | None:
    """The data-parallel degree that fills ``gpus`` GPUs, gpus / (tp*cp*ulysses*pp) (world size =
    tp*cp*ulysses*pp*dp, docs/interface.md), or None when the product does not divide them: the one place a degree
    is derived from a GPU count (plans, serving scenarios, the multimodal search's candidate layouts)."""
    rest = tp * cp * ulysses * pp
    return None if gpus % rest else gpus // rest


def derive_dp(p: ParallelPlan, world: int) -> int:
    """dp = world / (tp*cp*ulysses*pp) (:func:`data_parallel`); when dp is given the product must equal the world
    size."""
    rest = p.tp * p.cp * p.ulysses * p.pp
    factors = f"tp ({p.tp}) * cp ({p.cp}) * ulysses ({p.ulysses}) * pp ({p.pp})"
    if p.dp is not None:
        if rest * p.dp != world:
            raise _err(f"world size = tp*cp*ulysses*pp*dp: {factors} * dp ({p.dp}) = {rest * p.dp} "
                       f"!= {world} GPUs", "parallel.dp")
        return p.dp
    dp = data_parallel(world, tp=p.tp, pp=p.pp, cp=p.cp, ulysses=p.ulysses)
    if dp is None:
        raise _err(f"world size = tp*cp*ulysses*pp*dp: {world} GPUs is not divisible by {factors} = {rest}",
                   "parallel.dp")
    return dp


def check_serving_degrees(p: ParallelPlan) -> None:
    """Serving models tp, pp, ep and dp (DP attention): cp and ulysses must be 1 (the serving step has no context-
    or sequence-parallel attention)."""
    for key in ("cp", "ulysses"):
        if getattr(p, key) > 1:
            raise _err(f"serving models tp, pp, ep and dp (DP attention); {key} must be 1, got {getattr(p, key)}",
                       f"parallel.{key}")


def check_heads(m: ModelSpec, p: ParallelPlan) -> list[str]:
    """heads % tp; K/V heads split or replicated over tp and ulysses; ffn % tp. Returns notes."""
    notes: list[str] = []
    if m.heads % p.tp:
        raise _err(f"heads ({m.heads}) is not divisible by tp ({p.tp})", "parallel.tp")
    kv = m.kv
    if p.tp > kv:
        if p.tp % kv:
            raise _err(f"tp ({p.tp}) > kv_heads ({kv}) needs tp % kv_heads == 0 to replicate K/V heads", "parallel.tp")
        notes.append(f"tp ({p.tp}) > kv_heads ({kv}): K/V heads are replicated, each of the {kv} K/V heads is held "
                     f"by {p.tp // kv} TP ranks")
    elif kv % p.tp:
        raise _err(f"kv_heads ({kv}) is not divisible by tp ({p.tp})", "parallel.tp")
    heads_tp = m.heads // p.tp
    if heads_tp % p.ulysses:
        raise _err(f"(heads/tp) % ulysses != 0: heads ({m.heads}) / tp ({p.tp}) = {heads_tp} is not divisible by "
                   f"ulysses ({p.ulysses})", "parallel.ulysses")
    kv_tp = max(1, kv // p.tp)
    if p.ulysses > 1 and kv_tp < p.ulysses:
        if p.ulysses % kv_tp:
            raise _err(f"kv_heads/tp = {kv_tp} K/V heads per TP rank cannot be spread over ulysses ({p.ulysses})",
                       "parallel.ulysses")
        notes.append(f"kv_heads ({kv}) / tp ({p.tp}) = {kv_tp} < ulysses ({p.ulysses}): K/V heads are replicated "
                     f"over the Ulysses group after the all-to-all")
    elif p.ulysses > 1 and kv_tp % p.ulysses:
        raise _err(f"kv_heads/tp = {kv_tp} is not divisible by ulysses ({p.ulysses})", "parallel.ulysses")
    if m.ffn % p.tp and not (m.moe and m.moe.first_dense_layers == 0):
        raise _err(f"ffn_hidden ({m.ffn}) is not divisible by tp ({p.tp})", "parallel.tp")
    return notes


def _check_op_sac(m: ModelSpec, p: ParallelPlan) -> None:
    """torchtitan's per-op policy is modelled for dense, non-MLA layers on one TP and CP rank (memory/activations.py)."""
    why = [f"recompute {p.recompute} (needs selective)"] if p.recompute != "selective" else []
    why += ["recompute_modules set (Megatron's policy)"] if p.recompute_modules else []
    why += ["a MoE model"] if m.moe is not None else []
    why += ["MLA attention"] if m.mla is not None else []
    why += [f"tp {p.tp}"] if p.tp > 1 else []
    why += [f"cp {p.cp}"] if p.cp > 1 or p.ulysses > 1 else []
    if why:
        raise _err("selective_ac_option op (torchtitan's per-op selective checkpointing) is modelled for "
                   f"recompute selective on dense layers at tp 1 and cp 1; got {', '.join(why)}",
                   "parallel.selective_ac_option")


def check_model_switches(m: ModelSpec, t: TrainingConfig) -> None:
    """Training switches that hold only for some models: Megatron stores the activation input in fp8 only for
    SwiGLU (TransformerConfig.__post_init__, megatron/core/transformer/transformer_config.py at d98e8a64)."""
    if t.activation_func_fp8_input_store and (t.family != "megatron" or not m.glu):
        raise _err("activation_func_fp8_input_store is Megatron's fused bias-SwiGLU storing its input in fp8: it "
                   f"needs framework megatron (got {t.framework}) and a SwiGLU model (got {m.activation})",
                   "training.activation_func_fp8_input_store")


def check_recompute_modules(m: ModelSpec, p: ParallelPlan) -> None:
    """A recomputed module the model does not have is a mistake, not a no-op; so is offloading every layer
    (Megatron-Core TransformerConfig: CPU offloading only for fewer layers than the model has)."""
    if p.selective_ac_option == "op":
        _check_op_sac(m, p)
    if p.cpu_offloading_num_layers >= m.layers:
        raise _err(f"cpu_offloading_num_layers ({p.cpu_offloading_num_layers}) must be below the model's layers "
                   f"({m.layers})", "parallel.cpu_offloading_num_layers")
    if not p.recompute_modules:
        return
    needs = {"moe": m.moe is not None, "moe_act": m.moe is not None,
             "shared_experts": m.moe is not None and bool(m.moe.shared_ffn), "mla_up_proj": m.mla is not None,
             "mlp": any(not m.is_moe_layer(i) for i in range(m.layers))}
    for name in p.recompute_modules or ():
        if not needs.get(name, True):
            raise _err(f"recompute_modules names {name!r}, but {m.name} has no such module "
                       f"({'no MoE layers' if name.startswith(('moe', 'shared')) else 'no MLA' if name == 'mla_up_proj' else 'no dense MLP layers'})",
                       "parallel.recompute_modules")


def check_sequence(p: ParallelPlan, t: TrainingConfig) -> None:
    """seq % (2*cp) for head-tail CP; (seq/cp) % ulysses; (seq/(cp*ulysses)) % tp with sp."""
    s = t.seq_len
    if p.cp > 1 and s % (2 * p.cp):
        raise _err(f"seq_len ({s}) is not divisible by 2*cp = {2 * p.cp}: context parallelism splits the sequence "
                   f"into 2*cp chunks (rank i holds chunks i and 2*cp-1-i)", "training.seq_len")
    if s % p.cp == 0 and (s // p.cp) % p.ulysses:
        raise _err(f"seq_len/cp = {s} / {p.cp} = {s // p.cp} is not divisible by ulysses ({p.ulysses})",
                   "training.seq_len")
    local = s // (p.cp * p.ulysses)
    if p.sp and local % p.tp:
        raise _err(f"with sp, (seq_len/cp) % tp must be 0: seq_len ({s}) / (cp ({p.cp}) * ulysses ({p.ulysses})) = "
                   f"{local} is not divisible by tp ({p.tp})", "training.seq_len")


def check_moe(m: ModelSpec, p: ParallelPlan, t: TrainingConfig, dp: int) -> int:
    """experts % ep; expert grid fits (edp integral); MoE training with TP needs SP in Megatron (serving engines such
    as vLLM run MoE under TP without SP, so an inference plan is priced as they run it). Returns edp."""
    if m.moe is None:
        if p.ep > 1 or p.etp > 1:
            raise _err(f"ep ({p.ep}) / etp ({p.etp}) > 1 needs a MoE model; {m.name} is dense", "parallel.ep")
        return dp * p.tp * p.cp * p.ulysses
    if m.moe.experts % p.ep:
        raise _err(f"experts ({m.moe.experts}) is not divisible by ep ({p.ep})", "parallel.ep")
    if (m.moe.experts + p.redundant_experts) % p.ep:
        raise _err(f"EPLB places experts ({m.moe.experts}) + redundant_experts ({p.redundant_experts}) = "
                   f"{m.moe.experts + p.redundant_experts} slots evenly over ep ({p.ep}): not divisible",
                   "parallel.redundant_experts")
    if m.moe.expert_ffn_hidden % p.etp:
        raise _err(f"expert_ffn_hidden ({m.moe.expert_ffn_hidden}) is not divisible by etp ({p.etp})", "parallel.etp")
    span = dp * p.tp * p.cp * p.ulysses
    if span % (p.ep * p.etp):
        raise _err(f"expert data parallel = tp*cp*ulysses*dp / (ep*etp): tp ({p.tp}) * cp ({p.cp}) * ulysses "
                   f"({p.ulysses}) * dp ({dp}) = {span} is not divisible by ep ({p.ep}) * etp ({p.etp})",
                   "parallel.ep")
    if t.family == "megatron" and t.mode == "train" and p.tp > 1 and not p.sp:
        raise _err(f"MoE with tp ({p.tp}) > 1 needs sp: true in Megatron", "parallel.sp")
    return span // (p.ep * p.etp)


def check_batch(t: TrainingConfig, dp: int, p: ParallelPlan | None = None) -> int:
    """global_batch % (micro_batch*dp); returns the micro-batches per step. Then the schedule's own rules on the
    count (:meth:`simulator.plan.schedules.Schedule.check_batch`): interleaved 1F1B needs a multiple of pp
    (Megatron), DualPipe / DualPipeV at least 2*pp (DualPipe an even count), ZB-H1 pp and ZB-V 2*pp-1.
    """
    if t.global_batch % (t.micro_batch * dp):
        raise _err(f"global_batch ({t.global_batch}) is not divisible by micro_batch ({t.micro_batch}) * dp ({dp}) "
                   f"= {t.micro_batch * dp}", "training.global_batch")
    micro = t.global_batch // (t.micro_batch * dp)
    if p is not None:
        schedule_named(p.schedule).check_batch(p, t, dp, micro)
    return micro


def split_layers(m: ModelSpec, p: ParallelPlan, mtp_layers: int = 0
                 ) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """Layer indices per PP rank and per virtual chunk; chunk c = j*pp + i lives on rank i (Megatron interleaving);
    ``mtp_layers`` MTP modules' layers (indices ``layers`` on; training only: serving runs them only to draft
    speculative tokens) end the last chunk, on the rank that runs the model's last stage (rank 0 with DualPipeV and
    ZB-V, whose V ends there; :attr:`~simulator.plan.resolved.ResolvedPlan.last_stage_rank`).

    Returns:
        (layers of each rank, layer counts of each rank's chunks).
    """
    last = schedule_named(p.schedule).last_stage_rank(p.pp) if mtp_layers else -1
    return _split(m.layers, p.pp, p.vpp, p.pipeline_layers, mtp_layers, last)


@memo(maxsize=1024)
def _split(layers: int, pp: int, vpp: int, pipeline_layers: tuple[int, ...] | None, mtp_layers: int,
           mtp_rank: int = -1) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """:func:`split_layers` of its inputs (cached: a search asks for the same split many times)."""
    chunks_total = pp * vpp
    if pipeline_layers is None:
        if layers % chunks_total:
            raise _err(f"layers ({layers}) is not divisible by pp ({pp}) * vpp ({vpp}) = {chunks_total}; "
                       "give parallel.pipeline_layers for an uneven split", "parallel.pp")
        sizes = (layers // chunks_total,) * chunks_total
    else:
        sizes = pipeline_layers
        if len(sizes) != chunks_total or sum(sizes) != layers or min(sizes) < 0:
            raise _err(f"pipeline_layers {list(sizes)} must have pp*vpp = {chunks_total} non-negative entries "
                       f"summing to layers ({layers}); got {len(sizes)} entries summing to {sum(sizes)}",
                       "parallel.pipeline_layers")
    starts = [0, *itertools.accumulate(sizes)]
    ranks = []
    chunks = []
    for i in range(pp):
        cs = [i + j * pp for j in range(vpp)]
        ranks.append(tuple(itertools.chain.from_iterable(range(starts[c], starts[c] + sizes[c]) for c in cs)))
        chunks.append(tuple(sizes[c] for c in cs))
    if mtp_layers:  # Megatron places the MTP modules after the last layer, on the last stage's last chunk
        ranks[mtp_rank] += tuple(range(layers, layers + mtp_layers))
        chunks[mtp_rank] = chunks[mtp_rank][:-1] + (chunks[mtp_rank][-1] + mtp_layers,)
    return tuple(ranks), tuple(chunks)
