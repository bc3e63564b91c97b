"""The search checks a plan's offloaded host bytes once per plan without its micro-batch, unless activations are
offloaded (their bytes follow the micro-batch): its verdicts are ``check_host_memory``'s for every micro-batch, in
whichever order the micro-batches come (docs/search/time_to_answer.md, "Time to the answer, round 3")."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.errors import UserError
from simulator.memory.offload import host_bytes
from simulator.scenario.document import read_document
from simulator.search.evaluate import resolve
from simulator.search.run import search_context

ROOT = Path(__file__).resolve().parents[2]
POINT = {"tp": 8, "cp": 1, "ulysses": 1, "pp": 1, "vpp": 1, "ep": 1, "schedule": "1f1b", "sp": True,
         "split": "uniform", "recompute": "none", "sharding": "none", "tp_comm_overlap": False,
         "offload": "activations", "gpus": 8}


def _ctx(host_capacity: float | None = None):
    """22B (scenarios/korthikanti_22b.yaml, global batch 4) on one DGX A100 80GB; optionally less host memory."""
    data = read_document(ROOT / "scenarios" / "korthikanti_22b.yaml").data
    data.pop("parallel")
    ctx = search_context(data)
    if host_capacity is not None:
        cluster = ctx.fixed.cluster
        node = cluster.node.model_copy(update={"cpu": cluster.node.cpu.model_copy(
            update={"memory_capacity": host_capacity})})
        ctx.fixed = replace(ctx.fixed, cluster=cluster.model_copy(update={"node": node}))
    return ctx


def test_activation_offload_is_checked_per_micro_batch():
    ctx = _ctx()
    # 24 of 48 layers offloaded, one stage: one micro-batch in flight, the saved bytes of those layers at b
    one, two = (host_bytes(resolve(ctx, POINT | {"micro_batch": b}), 0)[0] for b in (1, 2))
    assert two == pytest.approx(2 * one, rel=1e-12) and one > 0        # saved activations scale with b
    cap = 8 * 1.5 * one          # a node of 8 GPUs holds micro-batch 1's bytes (8 x one) but not 2's (16 x one)
    for order in ((1, 2), (2, 1)):
        ctx = _ctx(cap)
        for b in order:
            if b == 1:
                assert resolve(ctx, POINT | {"micro_batch": 1}).training.micro_batch == 1
            else:
                with pytest.raises(UserError, match="host memory per node") as exc:
                    resolve(ctx, POINT | {"micro_batch": 2})
                assert exc.value.key_path == "parallel.cpu_offloading_num_layers"


def test_optimizer_offload_is_checked_once():
    ctx = _ctx()
    plan = resolve(ctx, POINT | {"offload": "optimizer", "sharding": "distributed_optimizer", "micro_batch": 1})
    need = 8 * host_bytes(plan, 0)[0]      # the host bytes do not depend on the micro-batch
    assert need == 8 * host_bytes(resolve(ctx, POINT | {"offload": "optimizer", "sharding": "distributed_optimizer", "micro_batch": 2}), 0)[0] > 0
    ctx = _ctx(need * 0.99)
    for b in (1, 2):
        with pytest.raises(UserError, match="host memory per node"):
            resolve(ctx, POINT | {"offload": "optimizer", "sharding": "distributed_optimizer", "micro_batch": b})
    assert sum(k[0] == "host" for k in ctx.built) == 1       # one check for both micro-batches


def test_the_largest_stage_is_a_bounding_stage():
    """``check_host_memory`` reads the bounding stages only (stage 0, 1 and p-1 of a dense model with even middle
    stages): on the 22B model at global batch 64, pp 4 and 8, every schedule (interleaved too) and each offload
    choice that the rules accept (optimizer and parameter offload: Megatron-Core offloads no activations with
    pp > 1), the largest host and NVMe bytes over them are those over every stage, exactly."""
    from simulator.memory.estimate import bounding_stages

    data = read_document(ROOT / "scenarios" / "korthikanti_22b.yaml").data
    data.pop("parallel")
    data["training"] = {**data["training"], "global_batch": 64}
    ctx = search_context(data)
    checked, schedules = 0, set()
    for schedule, vpp in (("1f1b", 1), ("1f1b", 2), ("gpipe", 1), ("zb1p", 1), ("zbv", 1), ("dualpipe", 1),
                          ("dualpipev", 1)):
        for tp, pp in ((2, 4), (1, 8)):
            for offload in ctx.space.values["offload"]:
                try:
                    plan = resolve(ctx, POINT | {"schedule": schedule, "vpp": vpp, "tp": tp, "pp": pp, "sp": tp > 1,
                                                 "offload": offload, "sharding": "distributed_optimizer",
                                                 "micro_batch": 1})
                except UserError:
                    continue
                if not plan.offload.any:
                    continue
                every = [host_bytes(plan, s) for s in range(pp)]
                bounding = [host_bytes(plan, s) for s in bounding_stages(plan)]
                assert len(bounding) < pp
                for i in (0, 1):
                    assert max(b[i] for b in bounding) == max(b[i] for b in every)
                checked += 1
                schedules.add(schedule)
    assert checked == 14 and schedules == {"1f1b", "gpipe", "zb1p", "zbv", "dualpipe", "dualpipev"}
