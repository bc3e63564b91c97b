"""Import a local Hugging Face ``config.json`` (Llama, Mistral, Mixtral, Qwen2/3 and their MoE, DeepSeek-V3, gpt-oss).

No network access: the path must be a local file. Field names follow the ``transformers`` configuration classes of
each ``model_type``; what a field means is stated next to its mapping below.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.errors import UserError
from simulator.limits import MAX_YAML_BYTES
from simulator.model.spec import ModelSpec
from simulator.model.strict import build
from simulator.yamlio import is_dir

_LLAMA_LIKE = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "deepseek_v3",
               "deepseek_v2", "gpt_oss"}


def _not_a_number(constant: str, path: Path):
    raise UserError(f"{constant} is not a finite number", file=str(path), key_path="model.hf_config")


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read ``config.json`` at ``path`` and map it to a ModelSpec.

    Raises:
        UserError: missing file, bad JSON, unsupported ``model_type`` (lists the supported ones) or missing field,
            with key path ``model.hf_config``.
    """
    p = Path(path)
    if is_dir(p):
        p = p / "config.json"
    try:
        if p.stat().st_size > MAX_YAML_BYTES:
            raise UserError(f"file is larger than {MAX_YAML_BYTES:,} bytes (a config.json is a few KiB)", file=str(p),
                            key_path="model.hf_config")
        cfg = json.loads(p.read_text(encoding="utf-8"), parse_constant=lambda c: _not_a_number(c, p))
    except FileNotFoundError:
        raise UserError(f"no such file {str(p)!r}", key_path="model.hf_config") from None
    except json.JSONDecodeError as err:
        raise UserError(f"not valid JSON: {err}", file=str(p), key_path="model.hf_config") from None
    except (OSError, ValueError) as err:  # a folder without config.json, a name the OS refuses
        raise UserError(f"cannot read {str(p)!r} ({type(err).__name__})", key_path="model.hf_config") from None
    if not isinstance(cfg, dict):
        raise UserError("config.json must hold a JSON object", file=str(p), key_path="model.hf_config")
    mtype = cfg.get("model_type")
    if mtype not in _LLAMA_LIKE:
        raise UserError(f"unsupported model_type {mtype!r}; accepted: {', '.join(sorted(_LLAMA_LIKE))}",
                        file=str(p), key_path="model.hf_config")
    try:
        data = _map(cfg, mtype)
    except KeyError as err:
        raise UserError(f"config.json lacks field {err.args[0]!r} needed for model_type {mtype!r}",
                        file=str(p), key_path="model.hf_config") from None
    data["name"] = cfg.get("_name_or_path") or p.parent.name or "hf_config"
    return build(ModelSpec, data, key_prefix="model", file=str(p))


def _map(cfg: dict[str, Any], mtype: str) -> dict[str, Any]:
    heads = cfg["num_attention_heads"]
    data: dict[str, Any] = {
        "layers": cfg["num_hidden_layers"],
        "hidden": cfg["hidden_size"],
        "heads": heads,
        "kv_heads": cfg.get("num_key_value_heads") or heads,
        "vocab": cfg["vocab_size"],
        "activation": "swiglu",
        "norm": "rmsnorm",
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "position_embedding": "rope",
        "max_position": cfg.get("max_position_embeddings", 2048),
        "linear_bias": bool(cfg.get("mlp_bias", False)) or mtype == "gpt_oss",
        "qkv_bias": bool(cfg.get("attention_bias", mtype in ("qwen2", "qwen2_moe"))),
        "qk_norm": mtype in ("qwen3", "qwen3_moe"),
        "dropout": float(cfg.get("attention_dropout", 0.0) or 0.0),
    }
    if cfg.get("head_dim") and mtype not in ("deepseek_v3", "deepseek_v2"):
        data["head_dim"] = cfg["head_dim"]
    if cfg.get("intermediate_size"):
        data["ffn_hidden"] = cfg["intermediate_size"]
    if mtype in ("deepseek_v3", "deepseek_v2"):
        data["mla"] = {"q_lora_rank": cfg.get("q_lora_rank"), "kv_lora_rank": cfg["kv_lora_rank"],
                       "qk_nope_head_dim": cfg["qk_nope_head_dim"], "qk_rope_head_dim": cfg["qk_rope_head_dim"],
                       "v_head_dim": cfg["v_head_dim"]}
    moe = _moe(cfg, mtype)
    if moe:
        data["moe"] = moe
    if cfg.get("num_nextn_predict_layers"):
        data["mtp_layers"] = int(cfg["num_nextn_predict_layers"])
    data.update(_window(cfg))
    quantization = _quantization(cfg, moe is not None)
    if quantization:
        data["weight_quantization"] = quantization
    return data


def _quantization(cfg: dict[str, Any], moe: bool) -> dict[str, Any] | None:
    """The checkpoint's ``quantization_config`` as ``weight_quantization`` (simulator/model/quantization.py):
    ``quant_method: mxfp4`` (gpt-oss) -> mxfp4; ``fp8`` with ``weight_block_size`` (DeepSeek-V3) -> fp8_block, without
    -> fp8. ``modules: experts`` when the model is MoE and ``modules_to_not_convert`` names the attention
    (``self_attn``: gpt-oss keeps attention, router, embedding and LM head in bf16), else ``all``. Other methods
    (GPTQ, AWQ, ...) are not modelled and leave it unset (``training.precision`` then gives the weights' bytes)."""
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = q.get("quant_method")
    if method == "mxfp4":
        fmt = "mxfp4"
    elif method == "fp8":
        fmt = "fp8_block" if q.get("weight_block_size") else "fp8"
    else:
        return None
    skipped = q.get("modules_to_not_convert") or []
    attention_kept = isinstance(skipped, list) and any("self_attn" in str(m) for m in skipped)
    return {"format": fmt, "modules": "experts" if moe and attention_kept else "all"}


def _window(cfg: dict[str, Any]) -> dict[str, Any]:
    """Sliding-window attention: ``sliding_window`` with ``layer_types`` (gpt-oss, Gemma-3: which layers slide)
    or ``use_sliding_window`` (Mistral, Qwen2: every layer); the pattern is the period of ``layer_types``."""
    window = cfg.get("sliding_window")
    if not window or cfg.get("use_sliding_window") is False:
        return {}
    types = cfg.get("layer_types")
    if not types:
        return {"sliding_window": int(window)}
    full = [i for i, t in enumerate(types) if t != "sliding_attention"]
    if not full:
        return {"sliding_window": int(window)}
    period = full[0] + 1
    expected = ["full_attention" if i % period == period - 1 else "sliding_attention" for i in range(len(types))]
    if [t if t == "sliding_attention" else "full_attention" for t in types] != expected:
        raise UserError(f"layer_types is not a periodic sliding/full pattern (first full layer {full[0]}); "
                        "write the model by hand with sliding_window and sliding_window_pattern",
                        key_path="layer_types")
    return {"sliding_window": int(window), "sliding_window_pattern": period}


def _moe(cfg: dict[str, Any], mtype: str) -> dict[str, Any] | None:
    """MoE fields: Mixtral num_local_experts; Qwen-MoE/DeepSeek num_experts or n_routed_experts, moe_intermediate_size."""
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    if not experts:
        return None
    ffn = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size")
    moe: dict[str, Any] = {"experts": experts, "top_k": cfg["num_experts_per_tok"], "expert_ffn_hidden": ffn}
    if mtype in ("deepseek_v3", "deepseek_v2"):
        moe["shared_experts"] = cfg.get("n_shared_experts") or 0
        moe["first_dense_layers"] = cfg.get("first_k_dense_replace", 0)
        moe["layer_freq"] = cfg.get("moe_layer_freq", 1)
        moe["router_bias"] = mtype == "deepseek_v3"
    if mtype == "qwen2_moe" and cfg.get("shared_expert_intermediate_size"):
        moe["shared_experts"] = 1
        moe["shared_expert_ffn_hidden"] = cfg["shared_expert_intermediate_size"]
    if mtype in ("qwen2_moe", "qwen3_moe"):
        moe["layer_freq"] = cfg.get("decoder_sparse_step", 1)
    if mtype == "gpt_oss":
        moe["router_bias"] = True
    return moe
