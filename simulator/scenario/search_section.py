"""The ``search:`` section of a scenario: which plans ``simulator search`` may consider (docs/search.md).

Every field restricts one dimension of the plan space; ``null`` (the default) lets the search choose from the
default candidates listed in the field's description. A dimension given in ``parallel:`` is pinned to that value
and its ``search:`` list, if any, must contain it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from simulator.errors import UserError
from simulator.plan.config import Recompute, RecomputeModule
from simulator.plan.schedules import ScheduleName
from simulator.units import parse_quantity

Sharding = Literal["none", "distributed_optimizer", "zero1", "zero2", "zero3"]
"""How optimizer states, gradients and parameters are sharded over data parallel ranks: none, Megatron's
distributed optimizer, or ZeRO stage 1-3 (FSDP)."""


def _bytes(value: object) -> float:
    try:
        return parse_quantity(value, "bytes")
    except UserError as exc:
        raise ValueError(exc.message) from None


Sizes = Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1, max_length=64)]
HeadroomBytes = Annotated[float, BeforeValidator(_bytes), Field(ge=0)]


class SearchSection(BaseModel):
    """Constraints of a plan search (docs/search.md, "The plan space")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: Sizes | None = Field(None, description="GPU counts to try (each at most the system's); null: the "
                                                  "system's GPU count")
    tp: Sizes | None = Field(None, description="tensor parallel sizes; null: powers of two up to the GPUs per node")
    pp: Sizes | None = Field(None, description="pipeline stages; null: every divisor of the layer count")
    vpp: Sizes | None = Field(None, description="virtual stages per rank; null: 1, 2, 3, 4, 6, 8")
    cp: Sizes | None = Field(None, description="context parallel sizes; null: 1 below 32K tokens, else 1, 2, 4, 8")
    ep: Sizes | None = Field(None, description="expert parallel sizes; null: 1 for dense models, every divisor of "
                                               "the expert count for MoE")
    ulysses: Sizes | None = Field(None, description="DeepSpeed-Ulysses sizes; null: 1 below 32K tokens, else 1, 2, "
                                                    "4, 8")
    split: list[Literal["uniform", "embedding_loss"]] | None = Field(
        None, min_length=1, description="how layers fall into the pp x vpp chunks: uniform, or embedding_loss "
                                        "(Megatron-Core --account-for-embedding/loss-in-pipeline-split: first and "
                                        "last chunk one layer fewer); null: both")
    tp_comm_overlap: list[bool] | None = Field(None, min_length=1, description="TP communication overlapped with "
                                                                              "GEMMs; null: [false, true]")
    recompute_modules: list[Annotated[list[RecomputeModule], Field(min_length=1)]] | None = Field(
        None, min_length=1, description="module sets selective recompute tries (Megatron --recompute-modules); "
                                        "null: [core_attn], [core_attn, layernorm], with mlp, with moe_act for MoE, "
                                        "[mla_up_proj, layernorm, moe_act] for MLA MoE (framework megatron)")
    offload: list[str] | None = Field(None, min_length=1, description="offload choices (names of the system's "
                                                                       "offload table); null: every one")
    micro_batch: Sizes | None = Field(None, description="micro-batch sizes; null: 1, 2, 4, 8")
    recompute: list[Recompute] | None = Field(None, min_length=1, description="recompute modes; null: all three")
    sharding: list[Sharding] | None = Field(
        None, min_length=1, description="data parallel sharding; null: none, distributed_optimizer (Megatron), "
                                        "zero1, zero2, zero3")
    schedule: list[ScheduleName] | None = Field(
        None, min_length=1, description="pipeline schedules; null: every registered one (1f1b, gpipe, DeepSeek's "
                                        "dualpipe and dualpipev, the zero-bubble zb1p and zbv)")
    sp: list[bool] | None = Field(None, min_length=1, description="sequence parallelism with tp > 1; null: [true] "
                                                                 "(Megatron's recommendation: it only saves memory)")
    tp_within_node: bool = Field(True, description="keep each TP group inside one node (tp <= GPUs per node)")
    memory_headroom: HeadroomBytes = Field(0.0, description="HBM to leave free above the device peak, bytes or "
                                                            "a quantity (\"4 GiB\")")
