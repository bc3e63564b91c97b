"""The host issue costs an implementation profile implies (:class:`simulator.compute.host.HostIssueCosts` from
:class:`simulator.implementation.profiles.Profile`): kernels x host seconds per kernel, plus the syncs' own cost,
or the per-layer seconds a profile measured whole."""

from __future__ import annotations

from simulator.caching import memo
from simulator.compute.host import HostIssueCosts
from simulator.implementation.profiles import Profile


@memo(maxsize=64)
def host_issue_costs(profile: Profile) -> HostIssueCosts | None:
    """The eager host issue costs of ``profile``; None when it launches through CUDA graphs (no host floor)."""
    if profile.launch == "cuda_graphs":
        return None
    h, k, s = profile.host, profile.kernels, profile.syncs
    fwd_k, bwd_k = h.per_kernel_s, h.backward_s
    if profile.measured_host is not None:
        m = profile.measured_host
        moe = (m.moe_forward_s, m.moe_backward_s, m.per_expert_forward_s, m.per_expert_backward_s)
    else:
        moe = (k.moe_forward * fwd_k + s.moe_forward * h.per_sync_s, k.moe_backward * bwd_k,
               k.per_expert_forward * fwd_k + s.per_expert_forward * h.per_sync_s, k.per_expert_backward * bwd_k)
    return HostIssueCosts(
        *moe, source=f"implementation profile {profile.name}",
        dense_fwd_s=k.dense_forward * fwd_k + s.dense_forward * h.per_sync_s, dense_bwd_s=k.dense_backward * bwd_k,
        checkpoint_fwd_s=h.checkpoint_forward_layer_s, checkpoint_bwd_s=h.checkpoint_backward_layer_s,
        sac_fwd_s=k.dense_forward * h.sac_forward_kernel_s, sac_bwd_s=k.dense_forward * h.sac_backward_kernel_s,
        step_s=k.per_step * fwd_k, dense_runs_ahead=not profile.layer_syncs, moe_runs_ahead=not profile.moe_syncs)
