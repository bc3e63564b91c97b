"""The serving engines' schedulers: one policy object per engine, chosen by ``serving.scheduler.policy``
(:class:`simulator.implementation.scheduler.EngineScheduler`, data in the engine profiles; docs/engine_schedulers.md).

A policy answers three questions for the loop of :mod:`simulator.serving.loop`:

- ``kv_free_bytes``: the bytes its K/V cache gets on one GPU (the engine's memory rule);
- ``schedule``: one step's work ``[(request, tokens)]`` and the preemptions it took;
- ``can_admit``: whether the queue's head could start now (the loop's run of pure decode steps stops there).

Requests are the loop's ``_Request`` (``prompt``, ``output``, ``computed``, ``generated``, ``blocks``, ``cached``;
``known`` = prompt + generated). Rules, with their sources (commits in simulator/implementation/scheduler.py):

- vLLM V1 (``vllm/v1/core/sched/scheduler.py`` ``schedule``): running requests first, in admission order, each its
  remaining tokens within the step's budget; when the pages run out the newest running request is preempted and
  recomputed later; a step that preempted admits nobody; then the queue first come first served. The cache is
  ``gpu_memory_utilization`` of total memory less the runtime, weights and activation peak.
- SGLang (``schedule_policy.py`` ``PrefillAdder``, ``scheduler.py`` ``get_next_batch_to_run``): a step is a prefill
  batch whenever one can be formed (the unfinished chunk first, then the queue), else a decode step of every running
  request. A request is admitted while ``input + min(max_new, clip) < free - sum over running of min(remaining
  output, clip) x new_token_ratio`` (``rem_total_tokens``); each admission takes ``input + min(max_new, clip)`` off
  the budget; prompt tokens per step at most ``chunked_prefill_size``, one chunked request at a time. Each decode
  step lowers the ratio by ``(init - min) / decay_steps`` to its floor; a decode step the pages cannot hold retracts
  the running request with the fewest output tokens (longest prompt, then the newest, on ties) to the back of the
  queue and resets the ratio.
  The static pool is ``mem_fraction_static`` x total memory for weights and cache together.
- TensorRT-LLM (``capacityScheduler.cpp``): GUARANTEED_NO_EVICT keeps every started request and admits the queue's
  head only if the blocks of its whole length (prompt + output) fit beside the blocks every started request still
  needs to finish (the first that does not fit stops admission); MAX_UTILIZATION admits what the step needs and
  pauses the newest started request when blocks run out (as vLLM's preemption). The cache is
  ``free_gpu_memory_fraction`` of the memory free after the runtime, weights and activation peak. A context request
  the step's ``max_num_tokens`` cannot hold waits unless chunked prefill is on.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

from simulator.implementation.scheduler import EngineScheduler
from simulator.memory import MemoryReport
from simulator.memory.kv_window import KvWindow
from simulator.memory.runtime import CUDA_CONTEXT_BYTES
from simulator.model.params import param_counts
from simulator.plan import ResolvedPlan


class Pages:
    """The paged K/V cache: whole pages of ``block`` tokens per request."""

    def __init__(self, total: int, block: int, window: KvWindow | None = None):
        self.total, self.block, self.used, self.window = total, block, 0, window

    @property
    def free_pages(self) -> int:
        return self.total - self.used

    def needed(self, tokens, computed=None):
        """Pages of ``tokens`` cached tokens (an int, or an array of them): whole pages on every layer, or with
        ``window`` the full-equivalent pages a sliding-window cache holds once a step has extended it to
        ``tokens`` after ``computed`` (default ``tokens - 1``: a decode step; simulator/memory/kv_window.py)."""
        if self.window is None:
            if isinstance(tokens, int):  # the schedulers' per-request calls: integer ceiling, no numpy dispatch
                return -(-tokens // self.block)
            return np.ceil(np.asarray(tokens) / self.block) if np.ndim(tokens) else math.ceil(tokens / self.block)
        computed = np.asarray(tokens) - 1 if computed is None else computed
        pages = np.ceil(self.window.step_pages(tokens, computed) - 1e-9)
        return pages if np.ndim(tokens) else int(pages)

    def grow(self, r: Any, tokens: int) -> bool:
        """Give ``r`` pages for ``tokens`` cached tokens; False (nothing changed) when too few are free. A
        sliding-window cache also gives back the pages its windows left (``extra`` < 0)."""
        extra = self.needed(tokens, min(r.computed, tokens - 1)) - r.blocks
        if extra > self.total - self.used:
            return False
        extra = extra if self.window is not None else max(0, extra)
        self.used += extra
        r.blocks += extra
        return True

    def free(self, r: Any) -> None:
        self.used -= r.blocks
        r.blocks = 0


def _decoding(r: Any) -> bool:
    return r.generated > 0 and r.computed == r.known - 1


def _requeue(r: Any, pages: Pages, waiting: deque, front: bool = True) -> None:
    """Preempt ``r`` by recompute: its pages freed, back to the front (vLLM) or the back (SGLang) of the queue with
    its cached prefix only."""
    pages.free(r)
    r.computed = r.cached
    r.preempted += 1
    if front:
        waiting.appendleft(r)
    else:
        waiting.append(r)


def engine_budget_bytes(memory: MemoryReport, utilization: float) -> float:
    """vLLM's share of a GPU for weights, transients and cache (vllm-project/vllm ``vllm/v1/worker/gpu_worker.py``
    ``determine_available_memory``): ``gpu_memory_utilization`` x total memory, measured after NCCL and the CUDA
    context are set up, less the runtime the forward loads beyond the bare context (:mod:`simulator.memory.runtime`).
    Not counted: the CUDA-graph pool estimate vLLM 0.21+ also subtracts (0.17-0.36 GiB in published logs)."""
    return utilization * (memory.hbm_capacity_bytes or 0.0) - (memory.runtime_bytes - CUDA_CONTEXT_BYTES)


class VllmV1:
    """vLLM V1's scheduler (module docstring); also the loop's rule without ``serving.scheduler``."""

    #: whether the engine runs a step's prefill chunks and decodes as one forward unless ``mixed_batch`` says
    MIXED = True

    def __init__(self, config: EngineScheduler | None = None):
        self.config = config

    @property
    def mixed(self) -> bool:
        """A step with prefill chunks is one forward (``mixed_batch``, else the engine's default); without a
        scheduler the loop prices prefill and decode as two steps, as before engine profiles."""
        if self.config is None:
            return False
        return self.MIXED if self.config.mixed_batch is None else self.config.mixed_batch

    def kv_free_bytes(self, memory: MemoryReport, stage: Any, kv: float, utilization: float, given: bool,
                      ranks: int) -> float:
        return engine_budget_bytes(memory, utilization) - (stage.peak - kv)

    def held(self, held: float, utilization: float) -> float:
        """What ``held`` bytes outside the memory report take from the cache (vLLM, SGLang: all of them)."""
        return held

    def can_admit(self, head: Any, running: list, pages: Pages, limits: Any) -> bool:
        budget = limits.max_batched_tokens
        need = head.known - head.computed
        n = need if budget is None else min(need, budget - len(running))
        whole = limits.chunked_prefill or n == need
        return n > 0 and whole and pages.needed(head.computed + n, head.computed) - head.blocks <= pages.free_pages

    def schedule(self, running: list, waiting: deque, pages: Pages, limits: Any) -> tuple[list, int]:
        budget = limits.max_batched_tokens if limits.max_batched_tokens is not None else math.inf
        work: list = []
        preempted = 0
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n = int(min(r.known - r.computed, budget))
            while not pages.grow(r, r.computed + n):
                victim = running.pop()  # the most recently admitted
                _requeue(victim, pages, waiting)
                preempted += 1
                if victim is r:
                    break
            else:
                work.append((r, n))
                budget -= n
                i += 1
                continue
            break  # r itself was preempted: it was the last running request
        if preempted:
            return work, preempted
        return work + self._admit(running, waiting, pages, limits, budget), 0

    def _admit(self, running: list, waiting: deque, pages: Pages, limits: Any, budget: float) -> list:
        """The queue, first come first served, while the budget, the seats and the pages allow."""
        work = []
        while waiting and budget > 0 and (limits.max_num_seqs is None or len(running) < limits.max_num_seqs):
            r = waiting[0]
            need = r.known - r.computed
            n = int(min(need, budget))
            if (not limits.chunked_prefill and n < need) or not self._room(r, n, running, pages):
                break
            if not pages.grow(r, r.computed + n):
                break
            waiting.popleft()
            running.append(r)
            work.append((r, n))
            budget -= n
            self._admitted(r, need)
        return work

    def _room(self, r: Any, n: int, running: list, pages: Pages) -> bool:
        """Whether the policy lets ``r`` in with ``n`` tokens this step (pages are checked apart)."""
        return True

    def _admitted(self, r: Any, need: int) -> None:
        """A policy's bookkeeping once ``r`` joined the running set with ``need`` prompt tokens left."""

    def after_decode(self, steps: int) -> None:
        """The engine's state after ``steps`` decode steps (nothing for vLLM)."""

    def decode_run(self, k: int, waiting: deque) -> int:
        """How many of ``k`` possible pure decode steps may run without the scheduler looking again."""
        return k


class TrtLlm(VllmV1):
    """TensorRT-LLM's capacity scheduler (module docstring): MAX_UTILIZATION is vLLM's rule with TensorRT-LLM's
    limits; GUARANTEED_NO_EVICT reserves every started request's whole length."""

    def kv_free_bytes(self, memory: MemoryReport, stage: Any, kv: float, utilization: float, given: bool,
                      ranks: int) -> float:
        free = (memory.hbm_capacity_bytes or 0.0) - memory.runtime_bytes - (stage.peak - kv)
        return utilization * free

    def held(self, held: float, utilization: float) -> float:
        return utilization * held  # a fraction of the memory left free

    def _room(self, r: Any, n: int, running: list, pages: Pages) -> bool:
        if self.config.capacity == "max_utilization":
            return True
        reserved = sum(max(0, pages.needed(q.prompt + q.output) - q.blocks) for q in running)
        return pages.needed(r.prompt + r.output) - r.blocks <= pages.free_pages - reserved

    def can_admit(self, head: Any, running: list, pages: Pages, limits: Any) -> bool:
        if not super().can_admit(head, running, pages, limits):
            return False
        return self._room(head, 0, running, pages)


class Sglang(VllmV1):
    """SGLang's scheduler (module docstring): prefill-first steps, admission by the new-token ratio, retraction."""

    MIXED = False  # --enable-mixed-chunk is off by default

    def __init__(self, config: EngineScheduler):
        super().__init__(config)
        self.init = config.new_token_ratio
        self.floor = config.new_token_ratio * config.min_new_token_ratio_factor
        self.decay = (self.init - self.floor) / config.new_token_ratio_decay_steps
        self.ratio = self.init

    def kv_free_bytes(self, memory: MemoryReport, stage: Any, kv: float, utilization: float, given: bool,
                      ranks: int) -> float:
        total = memory.hbm_capacity_bytes or 0.0
        if not given:
            utilization = (total - self.config.reserved_bytes(total, ranks)) / total
        return utilization * total - stage.bucket("weights")

    def _remaining(self, r: Any) -> int:
        return min(r.output - r.generated, self.config.clip_max_new_tokens)

    def _rem_total(self, running: list, pages: Pages) -> float:
        return pages.free_pages * pages.block - sum(self._remaining(q) for q in running) * self.ratio

    def can_admit(self, head: Any, running: list, pages: Pages, limits: Any) -> bool:
        return super().can_admit(head, running, pages, limits) and \
            head.known - head.computed + self._remaining(head) < self._rem_total(running, pages)

    def _admit(self, running: list, waiting: deque, pages: Pages, limits: Any, budget: float) -> list:
        self._rem = self._rem_total(running, pages)   # tokens the admitted requests may still need
        return super()._admit(running, waiting, pages, limits, budget)

    def _room(self, r: Any, n: int, running: list, pages: Pages) -> bool:
        return r.known - r.computed + self._remaining(r) < self._rem

    def _admitted(self, r: Any, need: int) -> None:
        self._rem -= need + self._remaining(r)

    def schedule(self, running: list, waiting: deque, pages: Pages, limits: Any) -> tuple[list, int]:
        budget = limits.max_batched_tokens if limits.max_batched_tokens is not None else math.inf
        work = []
        for r in running:  # the unfinished chunked prefill goes first
            if r.computed < r.known - 1 or (r.generated == 0 and r.computed < r.known):
                n = int(min(r.known - r.computed, budget))
                if n > 0 and pages.grow(r, r.computed + n):
                    work.append((r, n))
                    budget -= n
        work += self._admit(running, waiting, pages, limits, budget)
        if work:
            return work, 0
        return self._decode(running, waiting, pages)

    def _decode(self, running: list, waiting: deque, pages: Pages) -> tuple[list, int]:
        """A decode step of every decoding request; retract until the pages hold it."""
        decoding = [r for r in running if _decoding(r)]
        retracted = 0
        while decoding and sum(max(0, pages.needed(r.computed + 1) - r.blocks) for r in decoding) > pages.free_pages:
            # SGLang sorts by (outputs, -prompt) descending and pops the last: the fewest outputs, the longest prompt,
            # and among equals the newest
            victim = min(reversed(decoding), key=lambda r: (r.generated, -r.prompt))
            decoding.remove(victim)
            running.remove(victim)
            _requeue(victim, pages, waiting, front=False)  # scheduler.py _extend_requests_to_queue appends
            retracted += 1
        if retracted:
            self.ratio = self.init
        for r in decoding:
            pages.grow(r, r.computed + 1)
        self.after_decode(1)
        return [(r, 1) for r in decoding], retracted

    def after_decode(self, steps: int) -> None:
        self.ratio = max(self.floor, self.ratio - self.decay * steps)

    def decode_run(self, k: int, waiting: deque) -> int:
        return min(k, 1) if waiting else k  # the ratio decays each step: admission may open at any step


#: the policy object of each ``serving.scheduler.policy``
POLICIES = {"vllm_v1": VllmV1, "sglang": Sglang, "trtllm": TrtLlm}


#: element bytes of the start-up forward's activations: the engines run the model dtype (bf16) whatever the
#: weights' format (vLLM's mxfp4 / fp8 methods dequantize or quantize per GEMM; the residual stream stays 16-bit)
PROFILE_ACTIVATION_BYTES = 2.0


def profile_peak(config: EngineScheduler | None, budget: int, seqs: int | None) -> dict:
    """The transients the engine's start-up profile keeps out of its cache (simulator/implementation/scheduler.py
    ``profile_forward``) as :func:`simulator.memory.inference_memory` arguments: a forward of the ``budget`` tokens
    at 16-bit activations and the sampler run's logits of min(``seqs``, ``budget``) rows (``seqs`` None: one row per
    token); empty without the rule (the step's own transients)."""
    if config is None or not config.profile_forward:
        return {}
    rows = budget if seqs is None else min(seqs, budget)
    return {"activation_bytes": PROFILE_ACTIVATION_BYTES, "logit_rows": rows, "logit_bytes": config.profile_logit_bytes}


def policy_of(config: EngineScheduler | None) -> VllmV1:
    """A fresh policy object for one run of the loop (SGLang's carries the new-token ratio)."""
    return VllmV1() if config is None else POLICIES[config.policy](config)


def kv_blocks(config: EngineScheduler | None, memory: MemoryReport, tokens: int, block: int, utilization: float,
              given: bool, ranks: int, window: KvWindow | None = None, held: float = 0.0) -> int:
    """Pages of ``block`` tokens the engine's cache holds on the fullest stage of ``memory`` (a report whose caches
    hold ``tokens`` tokens in all, with the transients of one step): the policy's free bytes (``utilization``: the
    engine's memory fraction, ``given`` whether the scenario set it; ``ranks``: tp x pp) over one page's bytes (a
    page on every layer: with ``window`` the report's caches hold ``window.tokens(tokens)`` full-equivalent tokens),
    less ``held`` bytes the engine keeps beyond the report's weights (:func:`layout_bytes`) as its rule counts them."""
    ref = tokens if window is None else window.tokens(tokens)
    policy = policy_of(config)
    best = None
    for st in memory.stages:
        kv = sum(i.bytes for i in st.items if i.name == "kv_cache")
        if kv <= 0:
            continue
        free = policy.kv_free_bytes(memory, st, kv, utilization, given, ranks) - policy.held(held, utilization)
        n = max(0, math.floor(free / (kv / ref * block)))
        best = n if best is None else min(best, n)
    return best if best is not None else 0


#: trtllm-bench's bytes per weight and cache element by quantization (tuning.py BYTES_PER_ELEM; others 2)
TRTLLM_BENCH_BYTES = {"fp8": 1.0, "fp4": 0.5}


def trtllm_bench_limits(params: float, weight_dtype: str, kv_layers: int, kv_heads_held: int, head_dim: int,
                        kv_bytes: float, device_bytes: float, tp: int, pp: int, input_len: int, output_len: int,
                        fraction: float = 0.95) -> tuple[int, int]:
    """trtllm-bench's ``(max_batch_size, max_num_tokens)`` (NVIDIA/TensorRT-LLM ``tensorrt_llm/bench/build/tuning.py``
    ``calc_engine_setting`` and ``finetune_setting`` @ a7e572fb20c6), in GiB as it computes them:

    - cache = 0.95 x (tp x pp x device memory - params x bytes per weight); one token's cache = 2 x layers x
      K/V heads held over the TP group (``kv_heads_held``: at least one per rank, trtllm-bench's ``max(tp_size,
      num_key_value_heads)``) x head_dim x bytes per cache element (fp8 1, else 2); requests = cache / (token x (input + output));
    - raw batch = min(requests, 4096) / pp, raw tokens = min(raw batch x (1 + input / output), 32768);
    - batch rounded up to 32 (at least 64) below 256, to 128 below 1024, else to 256; tokens rounded up to 256 (at
      least 2048) below 4096, to 512 below 8192, else to 1024."""
    gib = 2**30
    token = 2 * kv_layers * kv_heads_held * head_dim * (1.0 if kv_bytes <= 1 else 2.0) / gib
    engine = params * TRTLLM_BENCH_BYTES.get(weight_dtype, 2.0) / gib
    cache = (device_bytes / gib * tp * pp - engine) * fraction
    requests = cache / (token * (input_len + output_len))
    if requests < 1:
        raise ValueError(f"trtllm-bench finds no room for one request of {input_len + output_len} tokens beside "
                         f"{engine:.1f} GiB of weights")
    raw_bs = min(requests, 4096) / pp
    raw_token = min(raw_bs * (1 + input_len / output_len), 32768)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    else:
        bs = (128 if raw_bs < 1024 else 256) * math.ceil(raw_bs / (128 if raw_bs < 1024 else 256))
    if raw_token < 4096:
        tokens = max(2048, 256 * math.ceil(raw_token / 256))
    else:
        tokens = (512 if raw_token < 8192 else 1024) * math.ceil(raw_token / (512 if raw_token < 8192 else 1024))
    return bs, tokens


def step_limits(config: EngineScheduler | None, rp: ResolvedPlan, weight_dtype: str, device_bytes: float,
                input_len: int, output_len: int, given: tuple[int | None, int | None]) -> tuple[int | None, int | None]:
    """The step's ``(max tokens, max sequences)``: ``given`` (serving.max_batched_tokens, max_num_seqs), or with
    ``limits: trtllm_bench`` trtllm-bench's rule (:func:`trtllm_bench_limits`) for the plan's model and GPUs."""
    if config is None or config.limits == "given":
        return given
    m, p = rp.model, rp.parallel
    bs, tokens = trtllm_bench_limits(param_counts(m)["total"], weight_dtype, m.layers, rp.kv_heads_tp * p.tp, m.dhead,
                                     rp.recipe.kv_cache, device_bytes, p.tp, p.pp, input_len, output_len)
    return tokens, bs
