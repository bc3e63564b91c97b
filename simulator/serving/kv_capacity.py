"""How many sequences a replica's K/V cache holds (:func:`kv_capacity`, from the memory report and the engine's
budget), and why it holds none (:func:`no_room_for_a_sequence`, a UserError on the key to change);
docs/serving/outputs.md."""

from __future__ import annotations

import math

from simulator.errors import UserError
from simulator.memory import MemoryReport
from simulator.memory.kv_window import KvWindow
from simulator.serving.scheduler import engine_budget_bytes


def kv_capacity(memory: MemoryReport, seqs: int, tokens: int = 1, block: int = 1, occupancy: float | None = None, *,
                utilization: float, window: KvWindow | None = None) -> int:
    """Sequences a replica's KV cache can hold: the engine's budget (:func:`engine_budget_bytes` at
    ``utilization``) minus everything but the cache on the fullest stage, over the cache one sequence takes there.
    The memory report holds ``seqs`` sequences of ``tokens`` each; a sequence here occupies ``occupancy`` tokens
    (default ``tokens``), rounded up to whole pages of ``block`` tokens (vLLM's paged cache); with ``window`` both
    counted as the full-equivalent tokens a sliding-window cache holds (simulator/memory/kv_window.py)."""
    occupied, tokens = ((math.ceil((occupancy or tokens) / block) * block, tokens) if window is None
                        else (window.tokens(occupancy or tokens), window.tokens(tokens)))
    budget = engine_budget_bytes(memory, utilization)
    best = None
    for st in memory.stages:
        kv = sum(i.bytes for i in st.items if i.name == "kv_cache")
        if kv <= 0:
            continue
        free = budget - (st.peak - kv)
        n = max(0, math.floor(free / (kv / (seqs * tokens) * occupied)))
        best = n if best is None else min(best, n)
    return best if best is not None else 0


def no_room_for_a_sequence(memory: MemoryReport, s) -> UserError:
    """Why the K/V cache holds no sequence, blamed on the key whose value breaks it (on the stage with the most
    besides its cache): the weights alone over the engine's share (``serving.gpu_memory_utilization``); one sequence
    (its prefill's transients and its cache) over what the weights leave (``serving.input_len``, with
    ``output_len``); else the transients of a prefill of ``serving.batch`` sequences together (they grow with the
    batch). A key the user did not write is marked ``(default)``."""
    gib, budget = 2**30, engine_budget_bytes(memory, s.gpu_memory_utilization)
    tokens = s.input_len + s.output_len
    util = f"gpu_memory_utilization {s.gpu_memory_utilization:g}" + (
        "" if "gpu_memory_utilization" in s.model_fields_set else " (default)")
    share = f"the engine's share of HBM ({util}: {budget / gib:.1f} GiB per GPU)"

    def kv_of(st) -> float:
        return sum(i.bytes for i in st.items if i.name == "kv_cache")

    st = max((st for st in memory.stages if kv_of(st) > 0), key=lambda st: st.peak - kv_of(st))  # kv_capacity's 0
    weights, transients = st.bucket("weights"), st.bucket("transient")
    if weights >= budget:
        return UserError(f"the K/V cache holds no sequence: the weights alone ({weights / gib:.1f} GiB per GPU) fill "
                         f"{share}; raise serving.gpu_memory_utilization or spread the weights over more GPUs",
                         key_path="serving.gpu_memory_utilization")
    cache = kv_of(st) / (s.batch * tokens) * math.ceil(tokens / s.kv_block_size) * s.kv_block_size
    if weights + transients / s.batch + cache > budget:
        return UserError(f"the K/V cache holds no sequence: one sequence of input_len {s.input_len:,} + output_len "
                         f"{s.output_len:,} = {tokens:,} tokens needs {cache / gib:.1f} GiB of K/V cache and "
                         f"{transients / s.batch / gib:.1f} GiB of prefill transients per GPU, more than the "
                         f"{(budget - weights) / gib:.1f} GiB the weights leave of {share}; shorten the sequences "
                         "or spread the model over more GPUs", key_path="serving.input_len")
    return UserError(f"the K/V cache holds no sequence: the transients of a prefill of batch {s.batch:,} x input_len "
                     f"{s.input_len:,} tokens ({transients / gib:.1f} GiB per GPU) and the weights "
                     f"({weights / gib:.1f} GiB) fill {share}; lower serving.batch (one sequence of "
                     f"{tokens:,} tokens alone fits)", key_path="serving.batch")
