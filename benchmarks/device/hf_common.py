"""Shared pieces of the Hugging Face / timm measurement campaign on one H200 (hf_train.py, hf_decode.py).

* ``CONFIGS``: the published dimensions of each model family measured, written out here so that nothing is
  downloaded (the device machine has no network). Sources: each model's ``config.json`` on the Hugging Face Hub
  (Qwen/Qwen2.5-0.5B, Qwen/Qwen2.5-1.5B, meta-llama/Llama-3.2-1B, allenai/OLMoE-1B-7B-0924). Weights are random
  (the library's own initialisation): time and memory do not depend on their values.
* ``Clock``: an absolute deadline (``HF_DEADLINE``, seconds since the epoch) shared by the scripts of one call,
  so that a case that would not finish in time is skipped with a row that says so instead of being cut off.
* ``profile_phases``: one step under torch.profiler, with ``phase:<name>`` ranges separated by device
  synchronisations, and the kernel / runtime-call / sync counts per phase read back from the profiler events.
* ``Log``: one JSON line per measurement appended (and flushed) to a jsonl file as soon as it exists.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext

import torch

CONFIGS = {
    # Qwen/Qwen2.5-0.5B config.json: 24 layers, hidden 896, 14 query / 2 K/V heads, SwiGLU 4864, vocab 151936,
    # q/k/v projections with bias, tied embeddings, RMSNorm eps 1e-6, rope theta 1e6.
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=True, hidden_act="silu"),
    # meta-llama/Llama-3.2-1B config.json: 16 layers, hidden 2048, 32 query / 8 K/V heads of 64, SwiGLU 8192,
    # vocab 128256, tied embeddings, llama3 rope scaling (factor 32), rope theta 5e5, RMSNorm eps 1e-5.
    "llama-3.2-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                         max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                         tie_word_embeddings=True, hidden_act="silu", attention_bias=False, mlp_bias=False),
    # Qwen/Qwen2.5-1.5B config.json: 28 layers, hidden 1536, 12 query / 2 K/V heads, SwiGLU 8960, vocab 151936.
    "qwen2.5-1.5b": dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=131072, rope_theta=1000000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=True, hidden_act="silu"),
    # allenai/OLMoE-1B-7B-0924 config.json: 16 layers, hidden 2048, 16 heads (MHA), 64 experts of SwiGLU 1024,
    # top-8, no top-k renormalisation, vocab 50304, untied head, q/k RMSNorm, rope theta 1e4.
    "olmoe-1b-7b": dict(model_type="olmoe", hidden_size=2048, intermediate_size=1024, num_hidden_layers=16,
                        num_attention_heads=16, num_key_value_heads=16, num_experts=64, num_experts_per_tok=8,
                        vocab_size=50304, max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5,
                        tie_word_embeddings=False, norm_topk_prob=False, router_aux_loss_coef=0.01,
                        output_router_logits=False, hidden_act="silu"),
}

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=512, max_position_embeddings=8192)
TINY_MOE = dict(TINY, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2, intermediate_size=32)

RUNTIME_LAUNCH = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                  "cudaLaunchCooperativeKernel")
#: other runtime calls counted by name: the synchronising ones, copies, graph launches
RUNTIME_OTHER = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                 "cudaMemcpyAsync", "cuMemcpyDtoH", "cudaStreamWaitEvent", "cudaGraphLaunch", "cudaMalloc",
                 "cudaFree")


def build_causal_lm(name: str, device, tiny: bool = False, dtype=torch.bfloat16, **kwargs):
    """A random-weight model of family ``name`` (``CONFIGS``), sdpa attention, built directly on ``device``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    dims = dict(CONFIGS[name])
    if tiny:
        dims.update(TINY_MOE if "num_experts" in dims else TINY)
        dims.pop("rope_scaling", None)
    model_type = dims.pop("model_type")
    config = AutoConfig.for_model(model_type, **dims)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa", **kwargs)
    return model


class Clock:
    def __init__(self, budget_s: float | None = None):
        env = os.environ.get("HF_DEADLINE")
        self.deadline = float(env) if env else time.time() + (budget_s or 600.0)

    def left(self) -> float:
        return self.deadline - time.time()


class Log:
    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def row(self, row: dict) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps(row, default=str) + "\n")
            fh.flush()
        brief = {k: v for k, v in row.items() if not isinstance(v, (dict, list))}
        print(json.dumps(brief, default=str)[:600], flush=True)


def is_cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def sync(device) -> None:
    if is_cuda(device):
        torch.cuda.synchronize()


def warm_clocks(device, seconds: float = 5.0) -> None:
    """A cold H200 idles near 345 MHz: run bf16 8192^3 products back to back for ``seconds`` first."""
    if not is_cuda(device):
        return
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
    del a
    torch.cuda.empty_cache()


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def reset_peak(device) -> None:
    if is_cuda(device):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak(device):
    return torch.cuda.max_memory_allocated() if is_cuda(device) else None


def allocated(device):
    return torch.cuda.memory_allocated() if is_cuda(device) else None


def profile_phases(device, phases, trace_path: str | None = None) -> dict:
    """Run ``phases`` (a list of (name, fn)) once under torch.profiler, each in a ``phase:<name>`` range followed
    by a device synchronisation, so that every kernel of a phase runs inside that phase's host range. Returns
    total and per-phase counts: device kernels (memcpy / memset apart), host launch calls and their host time,
    other runtime calls by name (synchronisations, copies, graph launches), device-to-host copies. The synchronisations added here (one per phase) are
    counted apart (``added_device_syncs``)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if is_cuda(device) else [])
    sync(device)
    t0 = time.perf_counter()
    with profile(activities=activities, record_shapes=trace_path is not None, with_stack=False) as prof:
        for name, fn in phases:
            with record_function(f"phase:{name}"):
                fn()
                sync(device)
    wall = time.perf_counter() - t0
    if trace_path:
        prof.export_chrome_trace(trace_path)
    return dict(tally(prof.events(), [name for name, _ in phases]), profiled_wall_s=wall,
                added_device_syncs=len(phases))


def _split(events):
    """Phase ranges (host), device events, and the runtime calls counted."""
    ranges, kernels, runtime = {}, [], []
    cuda_type = torch.autograd.DeviceType.CUDA
    for ev in events:
        if ev.name.startswith("phase:") and ev.device_type != cuda_type:
            ranges[ev.name[6:]] = (ev.time_range.start, ev.time_range.end)
        elif ev.device_type == cuda_type:
            kernels.append(ev)
        elif ev.name in RUNTIME_LAUNCH or ev.name in RUNTIME_OTHER:
            runtime.append(ev)
    return ranges, kernels, runtime


def _add_device_event(slot: dict, name: str) -> None:
    low = name.lower()
    if "memcpy" in low:
        slot["memcpy"] += 1
        if "dtoh" in low or "device -> pageable" in low or "device -> pinned" in low:
            slot["dtoh_copies"] += 1
    elif "memset" in low:
        slot["memset"] += 1
    else:
        slot["kernels"] += 1


def tally(events, phase_names) -> dict:
    """Counts per phase (a device event or runtime call belongs to the phase whose host range holds its start)."""
    ranges, kernels, runtime = _split(events)

    def phase_of(ev):
        for name, (lo, hi) in ranges.items():
            if lo <= ev.time_range.start <= hi:
                return name
        return "unassigned"

    names = list(phase_names) + ["unassigned"]
    per = {n: {"kernels": 0, "memcpy": 0, "memset": 0, "dtoh_copies": 0, "launch_calls": 0, "launch_host_s": 0.0,
               "runtime_calls": {}} for n in names}
    for ev in kernels:
        _add_device_event(per[phase_of(ev)], ev.name)
    for ev in runtime:
        slot = per[phase_of(ev)]
        if ev.name in RUNTIME_LAUNCH:
            slot["launch_calls"] += 1
            slot["launch_host_s"] += ev.time_range.elapsed_us() / 1e6
        else:
            slot["runtime_calls"][ev.name] = slot["runtime_calls"].get(ev.name, 0) + 1
    out = {key: sum(per[n][key] for n in names)
           for key in ("kernels", "memcpy", "memset", "dtoh_copies", "launch_calls", "launch_host_s")}
    calls = {}
    for n in names:
        for k, v in per[n]["runtime_calls"].items():
            calls[k] = calls.get(k, 0) + v
    out["runtime_calls"] = calls
    if not per["unassigned"]["kernels"] and not per["unassigned"]["launch_calls"]:
        del per["unassigned"]
    out["per_phase"] = per
    return out


def gzip_file(path: str) -> str:
    import gzip
    import shutil

    with open(path, "rb") as src, gzip.open(path + ".gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(path)
    return path + ".gz"


def env_info(device) -> dict:
    info = {"python": sys.version.split()[0], "torch": torch.__version__,
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for mod in ("transformers", "timm"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal
            info[mod] = f"unavailable: {exc}"
    if is_cuda(device):
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, sm_count=props.multi_processor_count, mem_total_bytes=props.total_memory,
                    cuda=torch.version.cuda)
        try:
            info["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,"
                 "temperature.gpu,memory.used", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception as exc:  # noqa: BLE001
            info["nvidia_smi"] = f"error: {exc}"
    info["cpu_count"] = os.cpu_count()
    return info


def autocast(device, enabled: bool):
    if not enabled:
        return nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def run_case(log, base: dict, clock: Clock, need_s: float, fn) -> bool:
    """Measure one case through ``fn`` (returns the measured dict) unless less than ``need_s`` is left."""
    row = dict(base)
    if clock.left() < need_s:
        row["skipped"] = f"{clock.left():.0f} s left, {need_s:.0f} s needed"
        log.row(row)
        return False
    t = time.perf_counter()
    try:
        row.update(fn())
    except Exception as exc:  # noqa: BLE001 - one failed case must not lose the others
        row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
    row["case_wall_s"] = time.perf_counter() - t
    log.row(row)
    gc.collect()
    if is_cuda(base.get("device", "cuda")):
        torch.cuda.empty_cache()
    return "error" not in row


def device_parser(steps: bool = True, budget_s: float = 300) -> argparse.ArgumentParser:
    """The options every HF device script takes: --out, --device, --tiny (a CPU dry run), --budget-s, and with
    ``steps`` the timed and warm-up step counts."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--budget-s", type=float, default=budget_s)
    if steps:
        parser.add_argument("--steps", type=int, default=6)
        parser.add_argument("--warmups", type=int, default=3)
    return parser
