"""What a serving engine costs beyond the GPU model (docs/engine_host.md):

- its host time in the serving loop's step prices (``serving.host``: simulator/implementation/host.py): each step's
  GPU time from :func:`simulator.serving.loop_inputs.loop_costs` with the engine core's host time added or overlapped and
  the API server's token work as a floor; the API server's per-request time goes to the loop as
  ``LoopCosts.request_s`` (requests reach the engine one after another);
- the memory its MoE kernels hold beyond the checkpoint's expert weights (``serving.scheduler.expert_layout_bytes``),
  which :func:`simulator.serving.scheduler.kv_blocks` keeps out of the K/V cache (``held``)."""

from __future__ import annotations

from dataclasses import replace

from simulator.errors import UserError
from simulator.implementation.host import EngineHost
from simulator.implementation.scheduler import EngineScheduler
from simulator.model.params import param_counts
from simulator.plan import ResolvedPlan
from simulator.serving.loop import LoopCosts


def with_host(costs: LoopCosts, host: EngineHost | None, speculative: bool = False) -> LoopCosts:
    """``costs`` with ``host``'s prices on every step: a decode step of ``seqs`` sequences schedules and emits
    ``seqs``; a prefill group of ``seqs`` chunks schedules ``seqs`` and emits none (a request's first token is part
    of its per-request work); a mixed step schedules every group's sequences and emits its decodes' tokens (the
    group of one-token parts). Unchanged without ``host``. Under speculative decoding (``speculative``) a decode
    step's engine-core host time is already in its price (once per iteration: simulator/serving/speculative.py), so
    only the API server's floor is added, and the other steps take the host as it runs then
    (:meth:`EngineHost.speculating`)."""
    if host is None:
        return costs
    decode, prefill, mixed = costs.decode_s, costs.prefill_s, costs.mixed_s
    if speculative:
        host = host.speculating()

    def decode_s(seqs: int, context: float) -> float:
        if speculative:
            return max(decode(seqs, context), host.token_s * seqs)
        return host.engine_s(decode(seqs, context), seqs, seqs)

    def prefill_s(seqs: int, new: int, past: int) -> float:
        return host.engine_s(prefill(seqs, new, past), seqs, 0)

    def mixed_s(groups: tuple[tuple[int, int, float], ...]) -> float:
        seqs = sum(k for k, _, _ in groups)
        decodes = sum(k for k, n, _ in groups if n == 1)
        return host.engine_s(mixed(groups), seqs, decodes)

    return replace(costs, decode_s=decode_s, prefill_s=prefill_s, mixed_s=None if mixed is None else mixed_s,
                   request_s=host.request_s)


def layout_bytes(config: EngineScheduler | None, rp: ResolvedPlan) -> float:
    """Bytes per GPU the engine holds for the quantized experts beyond the checkpoint's (``expert_layout_bytes``:
    its kernels' weight layout, per weight, by checkpoint format): the experts' parameters over ``ep x etp`` ranks
    and ``pp`` stages times the difference; 0 without a layout for the scenario's ``model.weight_quantization``."""
    q = rp.model.weight_quantization
    held = None if config is None or q is None else config.layout_of(q.format)
    if held is None:
        return 0.0
    if held < q.expert_bytes:
        raise UserError(f"the engine's expert layout holds {held:g} B per {q.format} weight, less than the "
                        f"checkpoint's {q.expert_bytes:g} B", key_path=f"serving.scheduler.expert_layout_bytes.{q.format}")
    p = rp.parallel
    return param_counts(rp.model).get("experts", 0) / (p.ep * p.etp * p.pp) * (
        held - q.expert_bytes)
