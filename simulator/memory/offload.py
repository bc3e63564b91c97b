"""What offload puts in host memory and on NVMe, and whether the node holds it (docs/offload.md).

Per GPU, of the parameters it owns (its ZeRO / distributed-optimizer shard, ``n_dense / d_dense + n_expert /
d_expert``), the offloaded share ``f`` (:class:`simulator.plan.offload.Offload`) keeps on the host:
- the fp32 master weights and the optimizer moments (``Recipe.main + Recipe.moments`` bytes per parameter);
- an fp32 gradient the CPU optimizer reads (4 B per parameter: DeepSpeed's ``single_partition_of_fp32_groups``
  gradients, Megatron ``HybridDeviceOptimizer``'s pinned CPU gradient copies);
- with ZeRO-Infinity's ``offload_param: cpu`` the 16-bit parameter shard (``Recipe.param`` bytes; ``nvme``: on the
  node's drives instead);
and Megatron's activation offload keeps the saved tensors of its first N layers of every micro-batch in flight.
A node holds its GPUs' sums; more than ``cpu.memory_capacity`` (or the drives' capacity) is refused with exit 2.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.errors import UserError
from simulator.hardware.cluster import ClusterSpec
from simulator.memory.activations import cached_layer_bytes
from simulator.memory.estimate import _layer_keys, activation_context, bounding_stages
from simulator.plan.offload import HOST_GRAD_BYTES
from simulator.plan.params import stage_params
from simulator.plan.resolved import ResolvedPlan

GB = 1e9


def owned_params(rp: ResolvedPlan, stage: int) -> float:
    """Parameters this rank of ``stage`` updates: its shard of the stage's dense and expert parameters."""
    sp = stage_params(rp, stage)
    if rp.recipe.stage == 0:
        return sp.dense + sp.expert
    return sp.dense / rp.dense_shard_degree + sp.expert / rp.expert_shard_degree


def offloaded_activation_bytes(rp: ResolvedPlan, stage: int = 0) -> float:
    """Bytes of saved activations the offloaded layers of ``stage`` move to the host per micro-batch (Megatron
    --cpu-offloading-num-layers: the first N layers' saved tensors)."""
    n = rp.offload.activation_layers
    if n == 0:
        return 0.0
    ctx = activation_context(rp)
    keys = _layer_keys(rp, stage)[:n]
    each = {key: cached_layer_bytes(rp.model, replace(ctx, recompute=key[1]), key[0]) for key in set(keys)}
    return sum(each[key] for key in keys)        # layer by layer, in order: the same sum


def host_bytes(rp: ResolvedPlan, stage: int) -> tuple[float, float]:
    """(host memory, NVMe) bytes one GPU of ``stage`` offloads (module docstring)."""
    off, rb = rp.offload, rp.recipe
    owned = owned_params(rp, stage)
    host = owned * off.optimizer_fraction * (rb.main + rb.moments + HOST_GRAD_BYTES)
    params = owned * rb.param if off.param_device != "none" else 0.0
    flight = rp.schedule.in_flight(rp.parallel.pp, rp.parallel.vpp, stage, rp.num_microbatches)
    host += offloaded_activation_bytes(rp, stage) * flight
    return (host + params, 0.0) if off.param_device == "cpu" else (host, params)


def check_host_memory(rp: ResolvedPlan, cluster: ClusterSpec) -> None:
    """Refuse a plan whose offloaded bytes exceed what a node holds (its GPUs of the plan, largest stage).

    The largest stage is one of :func:`~simulator.memory.estimate.bounding_stages`: where that leaves out the
    middle stages 2..p-2, each holds stage 1's layers in the same chunks, so the same owned parameters and offloaded
    layers (the same bytes, computed from the same values), and no more micro-batches in flight (no schedule
    increases them with the stage index), so no more host or NVMe bytes."""
    if not rp.offload.any:
        return
    node = cluster.node
    key = ("parallel.offload_param" if rp.offload.param_device != "none" else
           "parallel.optimizer_cpu_offload" if rp.offload.optimizer_fraction else "parallel.cpu_offloading_num_layers")
    if node.cpu.memory_capacity is None or node.cpu.memory_bandwidth is None:
        if key == "parallel.cpu_offloading_num_layers":
            return          # activation offload is priced on the link alone; its host bytes cannot be checked
        raise UserError(f"offload needs the host memory of node profile {node.name}: add cpu.memory_capacity and "
                        "cpu.memory_bandwidth (with memory_source) to it", key_path=key)
    gpus = min(rp.world_size, node.gpus)
    per_gpu = [host_bytes(rp, s) for s in bounding_stages(rp)]
    host = max(h for h, _ in per_gpu) * gpus
    if host > node.cpu.memory_capacity:
        raise UserError(f"offload needs {host / GB:,.1f} GB of host memory per node ({gpus} GPUs x "
                        f"{host / gpus / GB:,.1f} GB), but {node.name} has {node.cpu.memory_capacity / GB:,.1f} GB "
                        "(cpu.memory_capacity)", key_path=key)
    nvme = max(n for _, n in per_gpu) * gpus
    if nvme:
        if node.nvme is None:
            raise UserError(f"offload_param nvme needs the NVMe drives of node profile {node.name}: add its nvme "
                            "section", key_path=key)
        room = node.nvme.drives * node.nvme.capacity
        if nvme > room:
            raise UserError(f"offload_param nvme needs {nvme / GB:,.1f} GB of NVMe per node, but {node.name} has "
                            f"{room / GB:,.1f} GB", key_path=key)


def offload_memory(rp: ResolvedPlan, cluster: ClusterSpec) -> dict[str, float]:
    """The JSON's ``memory`` keys of offload (docs/offload.md; none without offload): the largest stage's bytes per
    GPU in host memory and on NVMe, and the node's host memory."""
    if not rp.offload.any or rp.training.mode == "inference":
        return {}
    per_gpu = [host_bytes(rp, s) for s in range(rp.parallel.pp)]
    return {"host_offload_bytes": max(h for h, _ in per_gpu), "nvme_offload_bytes": max(n for _, n in per_gpu),
            "host_capacity_bytes": cluster.node.cpu.memory_capacity or 0.0}
