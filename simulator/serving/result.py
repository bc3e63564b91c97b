"""What ``simulator serve`` prints: :class:`ServeResult`, its JSON (``to_dict()``) and its flat ``serve.*`` keys
(``summary()``); docs/serving/outputs.md defines every key. The numbers come from
:func:`simulator.serving.metrics.serve`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simulator.memory import MemoryReport
from simulator.serving.step import StepTime


@dataclass(frozen=True)
class ServeResult:
    """Everything ``simulator serve`` prints (``to_dict()``: docs/serving/outputs.md)."""

    header: dict[str, Any]
    prefill: StepTime
    prefill_tokens: int
    decode: StepTime
    decode_mean_s: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    replicas: int
    gpus: int
    kv_capacity_seqs: int
    kv_capacity_seqs_steady: int
    memory: MemoryReport
    curve: tuple[dict, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
    disaggregation: dict | None = None
    kv_capacity_blocks: int = 0
    saturation_request_rate: float | None = None
    rate_curve: tuple[dict, ...] = ()

    @property
    def tokens_per_s(self) -> float:
        s = self.header["serving"]
        return self.replicas * s["batch"] * s["output_len"] / self.e2e_s

    def summary(self) -> dict[str, Any]:
        """The key serving numbers as flat ``serve.*`` keys (regression goldens, sweeps)."""
        d = self.to_dict()
        row = {"serve.prefill_s": self.prefill.step_s, "serve.decode_step_s": self.decode.step_s,
               "serve.decode_mean_step_s": self.decode_mean_s, "serve.ttft_s": self.ttft_s,
               "serve.tpot_s": self.tpot_s, "serve.e2e_s": self.e2e_s,
               "serve.tokens_per_s": d["throughput"]["tokens_per_s"],
               "serve.tokens_per_s_per_gpu": d["throughput"]["tokens_per_s_per_gpu"],
               "serve.kv_capacity_seqs": self.kv_capacity_seqs,
               "serve.kv_capacity_seqs_steady": self.kv_capacity_seqs_steady}
        for p in self.curve:
            c = p["concurrency"]
            row.update({f"serve.curve.{c}.tpot_s": p["tpot_s"], f"serve.curve.{c}.ttft_s": p["ttft_s"],
                        f"serve.curve.{c}.tokens_per_s_per_gpu": p["tokens_per_s_per_gpu"]})
        if self.rate_curve:
            row["serve.saturation_request_rate"] = self.saturation_request_rate
            for p in self.rate_curve:
                r = f"{p['request_rate']:g}"
                row[f"serve.rate.{r}.stable"] = float(p["stable"])
                row.update({f"serve.rate.{r}.{k}": p[k] for k in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s",
                                                                   "e2e_p99_s", "tokens_per_s_per_gpu")
                            if p[k] is not None})
        return row

    def to_dict(self) -> dict[str, Any]:
        s = self.header["serving"]
        total = self.replicas * s["batch"] * (s["input_len"] + s["output_len"]) / self.e2e_s
        return {
            **self.header,
            "prefill": {**self.prefill.to_dict(), "tokens": self.prefill_tokens},
            "decode": {**self.decode.to_dict(), "mean_step_s": self.decode_mean_s},
            "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s,
            "throughput": {"tokens_per_s": self.tokens_per_s, "tokens_per_s_per_gpu": self.tokens_per_s / self.gpus,
                           "total_tokens_per_s": total, "requests_per_s": self.replicas * s["batch"] / self.e2e_s,
                           "tokens_per_s_per_user": 1.0 / self.tpot_s, "replicas": self.replicas},
            "kv_capacity_seqs": self.kv_capacity_seqs, "kv_capacity_seqs_steady": self.kv_capacity_seqs_steady,
            "memory": {**self.memory.to_dict(), "hbm_bytes": self.memory.hbm_capacity_bytes, "oom": self.memory.oom},
            "curve": list(self.curve),
            "kv_capacity_blocks": self.kv_capacity_blocks,
            "saturation_request_rate": self.saturation_request_rate,
            "rate_curve": list(self.rate_curve),
            "disaggregation": self.disaggregation,
            "warnings": list(self.warnings),
        }
