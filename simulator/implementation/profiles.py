"""Implementation profiles: what a framework really runs, as data (docs/implementation_profiles.md).

A profile names a framework and version and says how it realises a program: how many kernels a layer launches and
what each costs the host to issue, which device-to-host syncs empty the launch queue, the optimizer's
implementation, the MoE experts' implementation, the attention kernel, the K/V cache, and the defaults it gives
the ``training:`` and ``serving:`` keys that choose memory lifetimes and fused kernels. Every number or choice
carries its source (``sources``: dotted field -> framework file at a commit, or a measurement under
``benchmarks/device/``).

The shipped profiles are YAML files in ``simulator/implementation/frameworks/``; ``training.framework: NAME``
picks one (:func:`profile_named`), ``implementation: path.yaml`` reads a profile file (one written by
``simulator calibrate --trace``) and ``implementation: {file: ..., FIELD: ...}`` overrides fields
(:func:`resolve_profile`). ``base:`` makes a profile inherit every field it does not give from another.

``family`` says which memory and activation accounting rules apply (``megatron``: Megatron-Core's buffers and
saved tensors; ``pytorch``: plain PyTorch modules): consumers read ``family`` and the other attributes, never a
profile's name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from simulator.caching import memo
from simulator.errors import UserError
from simulator.implementation.host import EngineHost
from simulator.implementation.scheduler import EngineScheduler
from simulator.yamlio import is_file, read_yaml, validation_error_to_user_error

FRAMEWORKS_DIR = Path(__file__).resolve().parent / "frameworks"

_STRICT = ConfigDict(extra="forbid", frozen=True)

Family = Literal["megatron", "pytorch"]


class HostCosts(BaseModel):
    """Host (CPU) seconds to issue work eagerly, on the host the profile was measured on."""

    model_config = _STRICT

    per_kernel_s: float = Field(0.0, ge=0, le=1e-3, description="one kernel of a forward, from Python (and of a "
                                                                "backward unless backward_kernel_s is given)")
    backward_kernel_s: float | None = Field(None, ge=0, le=1e-3, description="one kernel of a backward (the "
                                                                           "autograd engine issues it)")
    per_sync_s: float = Field(0.0, ge=0, le=1e-2, description="one device-to-host synchronisation's own host cost")

    @property
    def backward_s(self) -> float:
        """Host seconds per backward kernel."""
        return self.per_kernel_s if self.backward_kernel_s is None else self.backward_kernel_s
    checkpoint_forward_layer_s: float = Field(
        0.0, ge=0, le=1e-1, description="extra forward host seconds of a layer under activation checkpointing "
                                        "(the checkpoint wrapper and its saved-tensor hooks)")
    checkpoint_backward_layer_s: float = Field(
        0.0, ge=0, le=1e-1, description="extra backward host seconds of a checkpointed layer (besides its "
                                        "recomputed forward's kernels)")
    sac_forward_kernel_s: float = Field(
        0.0, ge=0, le=1e-3, description="extra forward host seconds per forward kernel of a dense layer under "
                                        "op-level selective checkpointing (selective_ac_option op: the policy's "
                                        "TorchDispatchMode sees every op)")
    sac_backward_kernel_s: float = Field(
        0.0, ge=0, le=1e-3, description="extra backward host seconds per forward kernel of such a layer (the "
                                        "re-run forward issued and intercepted again, the checkpoint's hooks)")


class KernelCounts(BaseModel):
    """Kernels launched per transformer layer and micro-batch, eagerly (no CUDA graph)."""

    model_config = _STRICT

    dense_forward: float = Field(0.0, ge=0, le=1e5)
    dense_backward: float = Field(0.0, ge=0, le=1e5)
    moe_forward: float = Field(0.0, ge=0, le=1e5, description="a MoE layer without its experts")
    moe_backward: float = Field(0.0, ge=0, le=1e5)
    per_expert_forward: float = Field(0.0, ge=0, le=1e4, description="each local expert adds")
    per_expert_backward: float = Field(0.0, ge=0, le=1e4)
    per_step: float = Field(0.0, ge=0, le=1e6, description="per micro-batch outside the layers, forward and "
                                                           "backward: embedding, final norm, head, loss")


class MeasuredLayerHost(BaseModel):
    """Host seconds to issue one MoE layer, measured whole (replaces kernels x per-kernel seconds)."""

    model_config = _STRICT

    moe_forward_s: float = Field(ge=0, le=1.0)
    moe_backward_s: float = Field(ge=0, le=1.0)
    per_expert_forward_s: float = Field(ge=0, le=1e-1)
    per_expert_backward_s: float = Field(ge=0, le=1e-1)


class SyncCounts(BaseModel):
    """Device-to-host synchronisations that empty the launch queue: the host cannot issue past them."""

    model_config = _STRICT

    dense_forward: float = Field(0.0, ge=0, le=1e4, description="per dense layer forward")
    moe_forward: float = Field(0.0, ge=0, le=1e4, description="per MoE layer forward (token counts read on the "
                                                              "host)")
    per_expert_forward: float = Field(0.0, ge=0, le=1e3, description="per local expert per forward (a per-expert "
                                                                     "loop that reads its rows on the host)")
    per_step: float = Field(0.0, ge=0, le=1e4, description="per optimizer step (loss.item(), grad clipping)")


class OptimizerImpl(BaseModel):
    """How the optimizer step runs."""

    model_config = _STRICT

    impl: Literal["fused", "foreach", "for_loop"] = "fused"
    bandwidth_fraction: float | None = Field(
        None, gt=0, le=1, description="fraction of the GPU's HBM bandwidth the step achieves (measured); null: the "
                                      "GPU's memory efficiency")
    elements_per_kernel: float = Field(
        20_971_520.0, gt=0, description="fused/foreach: parameters per launch (multi_tensor_apply: 320 blocks of "
                                        "65,536 elements)")


def _pairs(value: Any) -> Any:
    """A mapping given in YAML as a sorted tuple of pairs (frozen, hashable, order-free)."""
    if isinstance(value, dict):
        return tuple(sorted(value.items()))
    return value


class Profile(BaseModel):
    """One implementation profile (module docstring)."""

    model_config = _STRICT

    name: str = Field(min_length=1, max_length=64)
    label: str = ""
    family: Family = "megatron"
    version: str = ""
    base: str | None = Field(None, description="the profile whose fields this one inherits")
    launch: Literal["eager", "compile", "cuda_graphs"] = "eager"
    host: HostCosts = HostCosts()
    kernels: KernelCounts = KernelCounts()
    measured_host: MeasuredLayerHost | None = None
    syncs: SyncCounts = SyncCounts()
    optimizer: OptimizerImpl = OptimizerImpl()
    moe_experts: Literal["grouped_gemm", "per_expert_loop", "te_grouped_linear", "deepgemm"] = "grouped_gemm"
    moe_permute: Literal["fused", "index_select", "index_copy", "gather_scatter", "hf_grouped_mm",
                         "hf_expert_loop"] | None = Field(
        None, description="the MoE block's chain outside its GEMMs as this implementation writes it "
                          "(simulator/program/op_chains.py PERMUTE_CHAINS); null: the scenario's moe.permute")
    attention: str = "fused"
    kv_cache: Literal["paged", "concat", "static"] = "paged"
    norm: Literal["fused", "upcast"] = Field(
        "fused", description="RMSNorm as this implementation writes it: fused (one kernel saving its input and "
                             "the fp32 rstd) or upcast (Hugging Face's LlamaRMSNorm / Qwen2RMSNorm in eager ops: "
                             "it saves an fp32 copy of its input and the normalized tensor before the weight)")
    sdpa_gqa: bool = Field(
        False, description="training attention calls SDPA with K/V at their own head count (enable_gqa); false: "
                           "K/V are expanded to every query head first (repeat_kv), as plain PyTorch models write it")
    separate_projections: bool = Field(
        False, description="q, k, v and gate, up are separate Linear modules (Hugging Face); false: fused qkv and "
                           "fc1 GEMMs. Under eager AMP autocast casts the fp32 norm output once per Linear")
    pipeline_p2p: Literal["paired", "separate"] = Field(
        "paired", description="pipeline transfers: paired (a stage's send and the receive that follows go out as "
                              "one batched call, Megatron's send_forward_recv_backward) or separate (each send "
                              "and each receive is its own blocking call, DeepSpeed's PipelineEngine: a stage "
                              "pays its receives besides its sends)")
    bf16_grad_sync: Literal["reduce_scatter", "all_reduce"] = Field(
        "reduce_scatter", description="bf16 with ZeRO-1: reduce_scatter (a distributed optimizer reduces each "
                                      "rank's shard) or all_reduce (DeepSpeed's BF16_Optimizer: the whole "
                                      "gradient all-reduced, the updated bf16 parameters all-gathered, the tied "
                                      "embedding's gradient all-reduced in fp32)")
    checkpoint_writer: Literal["distributed", "rank_files"] = Field(
        "distributed", description="who writes a checkpoint: distributed (PyTorch DCP and Megatron's fully "
                                   "parallel dist-checkpointing spread replicated pieces evenly over the ranks) or "
                                   "rank_files (DeepSpeed's save_checkpoint: data-parallel rank 0 writes its "
                                   "stage's layers, every rank its own optimizer partition)")
    training_defaults: tuple[tuple[str, Any], ...] = ()
    serving_defaults: tuple[tuple[str, Any], ...] = ()
    sources: tuple[tuple[str, str], ...] = ()

    _pair_fields = field_validator("training_defaults", "serving_defaults", "sources", mode="before")(_pairs)

    @field_validator("serving_defaults")
    @classmethod
    def _engine_sections(cls, pairs):
        """The engine's ``host`` and ``scheduler`` mappings are checked in the profile that writes them (the key and
        rule of simulator/implementation/host.py and scheduler.py), not only in a scenario that uses it."""
        for key, schema in (("host", EngineHost), ("scheduler", EngineScheduler)):
            section = dict(pairs).get(key)
            try:
                schema.model_validate(section) if isinstance(section, dict) else None
            except ValidationError as exc:
                e = exc.errors()[0]
                where = ".".join([key, *map(str, e["loc"])])
                raise ValueError(f"{where}: {e['msg'].removeprefix('Value error, ')}") from None
        return pairs

    def source_of(self, field: str) -> str | None:
        """The source recorded for dotted ``field`` or for the nearest section above it."""
        sources = dict(self.sources)
        parts = field.split(".")
        while parts:
            found = sources.get(".".join(parts))
            if found is not None:
                return found
            parts.pop()
        return None

    @property
    def layer_syncs(self) -> bool:
        """Whether a dense layer's forward empties the launch queue (the host cannot run ahead across layers)."""
        return self.syncs.dense_forward > 0

    @property
    def moe_syncs(self) -> bool:
        """Whether a MoE layer's forward empties the launch queue."""
        return self.syncs.moe_forward > 0 or self.syncs.per_expert_forward > 0


def _read(path: Path | str) -> tuple[dict, Any]:
    located = read_yaml(path)
    if not isinstance(located.data, dict):
        raise UserError("an implementation profile is a mapping (name, family, host, kernels, ...)", file=str(path))
    return located.data, located


def _build(data: dict, file: str | None, located: Any = None, key_prefix: str | None = None) -> Profile:
    try:
        return Profile(**data)
    except ValidationError as exc:
        raise validation_error_to_user_error(exc, file=file, located=located, key_prefix=key_prefix) from None
    except TypeError as exc:
        raise UserError(f"not a profile mapping: {exc}", file=file, key_path=key_prefix) from None


def _merge(base: dict, over: dict) -> dict:
    """``over`` on top of ``base``, mappings merged key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@memo(maxsize=None, loaded=True)
def shipped_names() -> tuple[str, ...]:
    """The names of the shipped profiles: the stems of ``frameworks/*.yaml``, sorted (no file is read)."""
    return tuple(sorted(path.stem for path in FRAMEWORKS_DIR.glob("*.yaml")))


@memo(maxsize=None, loaded=True)
def _raw(name: str) -> tuple[dict, Path]:
    """The data of shipped profile ``name`` as its file gives it (read once; never mutated: :func:`_merge` copies)."""
    path = FRAMEWORKS_DIR / f"{name}.yaml"
    return _read(path)[0], path


def _expanded(name: str, seen: tuple[str, ...] = ()) -> dict:
    """The data of shipped profile ``name`` with its ``base:`` chain merged under it (reading only that chain)."""
    data, path = _raw(name)
    base = data.get("base")
    if base is None:
        return data
    if base not in shipped_names() or base in seen + (name,):
        raise UserError(f"base {base!r} is not a shipped profile (or forms a cycle)", file=str(path), key_path="base")
    return _merge(_merged_base(_expanded(base, seen + (name,))), data)


def _merged_base(data: dict) -> dict:
    """A base's data without what names the base itself (name, label, version); every other field, ``sources``
    included, is inherited and merged key by key."""
    return {k: v for k, v in data.items() if k not in ("name", "label", "version")}


@memo(maxsize=None, loaded=True)
def shipped_profiles() -> dict[str, Profile]:
    """Every profile in ``frameworks/``, by name (its file stem), with ``base:`` chains merged: every file is read
    first (a malformed one is reported before any profile is built), then each is built and checked."""
    for name in shipped_names():
        _raw(name)
    return {name: profile_named(name) for name in shipped_names()}


def profile_names() -> tuple[str, ...]:
    return tuple(shipped_profiles())


def profile_named(name: str) -> Profile:
    """The shipped profile ``name``, built from its file and its ``base:`` chain's only (a scenario needs one
    profile, not all); an unknown name is a :class:`UserError` listing the names."""
    if name not in shipped_names():
        raise UserError(f"unknown framework {name!r} (shipped implementation profiles: {', '.join(shipped_names())}; "
                        "or give a profile file with `implementation: path.yaml`)", key_path="training.framework")
    return _shipped(name)


@memo(maxsize=None, loaded=True)
def _shipped(name: str) -> Profile:
    """Shipped profile ``name`` built, and checked to carry its file's name."""
    path = _raw(name)[1]
    profile = _build(_expanded(name), str(path))
    if profile.name != name:
        raise UserError(f"profile name {profile.name!r} differs from its file name {name!r}", file=str(path),
                        key_path="name")
    return profile


def _data_of(profile: Profile) -> dict:
    """``profile`` as the mapping a YAML file gives (its pair tuples back as mappings), to merge fields onto."""
    data = profile.model_dump(mode="python")
    return {k: (dict(v) if k in ("training_defaults", "serving_defaults", "sources") else v) for k, v in data.items()}


def resolve_profile(framework: str, section: Any, scenario_file: str | None) -> Profile:
    """The profile a scenario runs: the shipped ``framework``, then ``section`` (the scenario's
    ``implementation:``: a profile file's path, or a mapping of overrides with an optional ``file:``) on top."""
    if section is None:
        return profile_named(framework)
    if isinstance(section, str):
        section = {"file": section}
    if not isinstance(section, dict):
        raise UserError(f"expected a profile file's path or a mapping of profile fields, got "
                        f"{type(section).__name__}", key_path="implementation")
    data = _data_of(profile_named(framework))
    overrides = dict(section)
    file = overrides.pop("file", None)
    if file is not None:
        if not isinstance(file, str):
            raise UserError("expected a path", key_path="implementation.file")
        base_dir = Path(scenario_file).parent if scenario_file else Path.cwd()
        path = Path(file) if Path(file).is_absolute() else base_dir / file
        if not is_file(path):
            raise UserError(f"profile file {str(path)!r} does not exist", key_path="implementation.file")
        loaded, located = _read(path)
        if loaded.get("base") is not None:
            data = _data_of(profile_named(str(loaded["base"])))
        data = _merge(data, loaded)
        _build(data, str(path), located)        # the file alone must be valid: errors point into it
    merged = _merge(data, overrides)
    merged.setdefault("name", framework)
    return _build(merged, None, key_prefix="implementation")
