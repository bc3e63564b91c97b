"""How dispatch, the expert FFN and combine share time: sequential or streamed in chunks."""

from __future__ import annotations

from simulator.errors import UserError


def layer_time(dispatch_s: float, compute_s: float, combine_s: float, mode: str, chunks: int = 4) -> float:
    """Seconds of one MoE layer's dispatch + expert FFN + combine.

    ``sequential`` (NCCL: a CPU sync between the steps): ``d + f + c``. ``streamed`` (DeepEP: tokens are computed
    as they arrive and combined as they finish): a two-resource pipeline of ``chunks`` equal chunks, the network
    carrying dispatch and combine, the SMs the FFN: ``(d + f + c)/n + (n - 1)/n * max(d + c, f)``, which is
    ``d + f + c`` for one chunk and tends to ``max(d + c, f)`` (blog notes: total = max(comm, compute)) as n grows;
    the first chunk's dispatch and the last one's combine are the pipeline fill.
    """
    if chunks < 1:
        raise UserError(f"pipeline chunks must be >= 1, got {chunks}", key_path="chunks")
    total = dispatch_s + compute_s + combine_s
    if mode == "sequential":
        return total
    if mode == "streamed":
        return total / chunks + (chunks - 1) / chunks * max(dispatch_s + combine_s, compute_s)
    raise UserError(f"unknown overlap mode {mode!r}; accepted: sequential, streamed", key_path="overlap")


def sm_slowdown(total_sms: int, reserved_sms: int) -> float:
    """Factor on expert GEMM time when ``reserved_sms`` of ``total_sms`` run communication: SMs / (SMs - k)."""
    if reserved_sms >= total_sms:
        raise UserError(f"communication reserves {reserved_sms} SMs of {total_sms}; none left for the GEMMs",
                        key_path="reserved_sms")
    return total_sms / (total_sms - reserved_sms)
