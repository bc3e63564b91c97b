"""Text table, CSV rows and the plot of ``simulator serve`` (docs/serving.md)."""

from __future__ import annotations

from pathlib import Path

from simulator.units import GIBI


def render_serving(result) -> str:
    """The key numbers, the decode and prefill breakdowns, and the curve as plain text."""
    d = result.to_dict()
    s, t = d["serving"], d["throughput"]
    lines = [f"{d['scenario']}: {d['model']} on {d['system']['gpus']} x {d['system']['profile']} GPUs, "
             f"tp {d['parallel']['tp']} pp {d['parallel']['pp']} ep {d['parallel']['ep']} dp {d['parallel']['dp']}",
             f"batch {s['batch']} per replica, input {s['input_len']}, output {s['output_len']} tokens, "
             f"CUDA graphs {'on' if s['cuda_graphs'] else 'off'}, kernels {s['kernels']}, attention {s['attention']}",
             "",
             f"static batch: all {s['batch']} requests of a replica arrive at once and prefill together (TTFT: the "
             "whole batch's prefill)",
             f"prefill          {d['prefill']['step_s'] * 1e3:10.3f} ms  ({d['prefill']['tokens']} tokens)",
             f"decode step      {d['decode']['step_s'] * 1e3:10.3f} ms  (context {s['input_len']}); "
             f"mean over output {d['decode']['mean_step_s'] * 1e3:.3f} ms",
             f"TTFT {d['ttft_s'] * 1e3:.1f} ms   TPOT {d['tpot_s'] * 1e3:.2f} ms   end-to-end {d['e2e_s']:.3f} s",
             f"throughput {t['tokens_per_s']:,.0f} output tokens/s ({t['tokens_per_s_per_gpu']:,.0f} per GPU), "
             f"{t['total_tokens_per_s']:,.0f} total tokens/s",
             f"memory peak {d['memory']['device_peak_bytes'] / GIBI:.1f} GiB of {d['memory']['hbm_bytes'] / GIBI:.0f}"
             f"; KV cache holds {d['kv_capacity_seqs']} sequences per replica (in "
             f"{s['gpu_memory_utilization']:g} of HBM, gpu_memory_utilization)", "",
             f"{'op class':<12}{'prefill ms':>12}{'decode ms':>12}"]
    for key, value in d["decode"]["breakdown_s"].items():
        pre = d["prefill"]["breakdown_s"].get(key, 0.0)  # decode's "draft" (speculative decoding) only
        if value or pre:
            lines.append(f"{key:<12}{pre * 1e3:12.3f}{value * 1e3:12.3f}")
    if d["curve"]:
        lines += ["", "latency-throughput curve: continuous batching in steady state, `concurrency` requests in flight;",
                  "a new request waits for the next iteration and prefills alone (TTFT: half an iteration + its "
                  "prefill + one decode step)",
                  f"{'concurrency':>11}{'batch':>7}{'TTFT ms':>10}{'TPOT ms':>10}{'tok/s':>12}{'tok/s/GPU':>11}"]
        for p in d["curve"]:
            lines.append(f"{p['concurrency']:>11}{p['batch_per_replica']:>7}{p['ttft_s'] * 1e3:>10.1f}"
                         f"{p['tpot_s'] * 1e3:>10.2f}{p['tokens_per_s']:>12,.0f}{p['tokens_per_s_per_gpu']:>11,.0f}"
                         + ("  KV-limited" if p["kv_limited"] else "")
                         + ("  prefill-bound" if p.get("prefill_bound") else ""))
    if d["rate_curve"]:
        lines += ["", f"request rate (Poisson, {s['num_requests']} requests each): saturation "
                      f"{d['saturation_request_rate']:.4g} requests/s; KV cache {d['kv_capacity_blocks']:,} pages of "
                      f"{s['kv_block_size']} tokens per replica",
                  f"{'req/s':>8}{'util':>6}{'batch':>7}{'TTFT p50':>10}{'p99 ms':>8}{'TPOT p50':>10}{'p99 ms':>8}"
                  f"{'e2e p50':>9}{'p99 s':>7}{'tok/s/GPU':>11}{'preempt':>8}"]
        for p in d["rate_curve"]:
            if p["stable"]:
                lat = (f"{p['ttft_p50_s'] * 1e3:>10.1f}{p['ttft_p99_s'] * 1e3:>8.1f}"
                       f"{_ms(p['tpot_p50_s']):>10}{_ms(p['tpot_p99_s']):>8}"
                       f"{p['e2e_p50_s']:>9.2f}{p['e2e_p99_s']:>7.2f}")
            else:
                lat = f"{'unstable: the queue grows without bound':>52}"
            lines.append(f"{p['request_rate']:>8.4g}{p['utilization']:>6.2f}{p['batch_mean']:>7.1f}{lat}"
                         f"{p['tokens_per_s_per_gpu']:>11,.0f}{p['preemptions']:>8}")
    if d["disaggregation"]:
        g, k = d["disaggregation"], d["disaggregation"]["kv_transfer"]
        lines.insert(9, f"disaggregated: {g['prefill_replicas']} prefill + {g['decode_replicas']} decode replicas; "
                        f"K/V hand-off {k['bytes_per_gpu'] / 2**20:,.0f} MiB per GPU in {k['time_s'] * 1e3:.2f} ms "
                        f"over {k['link']}")
    if d.get("speculative"):
        sp = d["speculative"]
        lines += ["", f"speculative decoding ({s['speculative']['method']}): per iteration {sp['num_speculative_tokens']} "
                      f"draft passes (top-k {sp['topk']}) {sp['draft_s'] * 1e3:.3f} ms + verify of "
                      f"{sp['verified_tokens']} tokens {sp['verify_s'] * 1e3:.3f} ms + host {sp['host_s'] * 1e3:.3f} ms = "
                      f"{sp['iteration_s'] * 1e3:.3f} ms for {sp['expected_tokens']:.3f} tokens per sequence "
                      f"(batch {s['batch']}, context {s['input_len']}); decode steps above are per token"]
    lines += [f"warning: {w}" for w in d["warnings"]]
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.2f}"


def curve_rows(result) -> list[dict]:
    """The curve's rows, or one row of the static batch when no concurrency was asked for; then the request-rate
    curve's rows (``request_rate`` set)."""
    d = result.to_dict()
    if d["curve"] or d["rate_curve"]:
        return d["curve"] + d["rate_curve"]
    return [{"concurrency": d["serving"]["batch"] * d["throughput"]["replicas"],
             "batch_per_replica": d["serving"]["batch"], "kv_limited": False, "ttft_s": d["ttft_s"],
             "tpot_s": d["tpot_s"], "e2e_s": d["e2e_s"], "tokens_per_s": d["throughput"]["tokens_per_s"],
             "tokens_per_s_per_gpu": d["throughput"]["tokens_per_s_per_gpu"],
             "tokens_per_s_per_user": d["throughput"]["tokens_per_s_per_user"]}]


def plot_serving(result, path: str | Path) -> Path:
    """Left: tokens/s per GPU against tokens/s per user (the latency-throughput curve); right: the decode step's
    breakdown by op class."""
    from simulator.report.plots import _pyplot

    plt = _pyplot()
    d = result.to_dict()
    rows = [r for r in curve_rows(result) if "concurrency" in r]
    rates = [r for r in d["rate_curve"] if r["stable"]]
    fig, axes = plt.subplots(1, 3 if rates else 2, figsize=(16 if rates else 11, 4.2))
    a, b = axes[0], axes[1]
    a.plot([r["tokens_per_s_per_user"] for r in rows], [r["tokens_per_s_per_gpu"] for r in rows], "o-")
    for r in rows:
        a.annotate(str(r["concurrency"]), (r["tokens_per_s_per_user"], r["tokens_per_s_per_gpu"]), fontsize=7,
                   textcoords="offset points", xytext=(3, 3))
    a.set_xlabel("tokens/s per user (1 / TPOT)")
    a.set_ylabel("output tokens/s per GPU")
    a.set_title("latency-throughput (labels: concurrency)")
    a.grid(alpha=0.3)
    br = {k: v * 1e3 for k, v in result.to_dict()["decode"]["breakdown_s"].items() if v > 0}
    b.barh(list(br), list(br.values()))
    b.set_xlabel("ms per decode step")
    b.set_title("decode step by op class")
    if rates:
        c = axes[2]
        x = [r["tokens_per_s_per_gpu"] for r in rates]
        for key, style in (("ttft_p50_s", "o-"), ("ttft_p99_s", "o--"), ("tpot_p50_s", "s-"), ("tpot_p99_s", "s--")):
            if rates[0][key] is not None:
                c.plot(x, [r[key] * 1e3 for r in rates], style, label=key.replace("_s", ""))
        c.set_yscale("log")
        c.set_xlabel("output tokens/s per GPU (Poisson arrivals)")
        c.set_ylabel("ms")
        c.set_title(f"latency vs throughput (saturation {d['saturation_request_rate']:.3g} req/s)")
        c.legend(fontsize=7)
        c.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
