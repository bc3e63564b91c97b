"""``serving.speculative``'s draft model resolved to a :class:`ModelSpec`, and the checks that need the models
(docs/speculative.md): the scenario loader runs :func:`check_speculative`; ``simulate_serving`` reads
:func:`draft_model_of` (a preset or file is read here, never by the serving config)."""

from __future__ import annotations

from pathlib import Path

from simulator.errors import UserError
from simulator.implementation.serving import ServingConfig
from simulator.model import ModelSpec, load_hf_config, load_model_preset
from simulator.model.strict import build

KEY = "serving.speculative.draft_model"


def draft_model_of(serving: ServingConfig | None, file: str | None) -> ModelSpec | None:
    """The draft model of method ``draft_model`` (``preset: NAME``, ``hf_config: PATH`` relative to ``file``, or
    inline fields overriding either), None for the other methods or without speculation."""
    spec = serving.speculative if serving is not None else None
    if spec is None or spec.draft_model is None:
        return None
    fields = dict(spec.draft_model)
    preset, hf = fields.pop("preset", None), fields.pop("hf_config", None)
    if preset is not None and hf is not None:
        raise UserError("give either preset or hf_config, not both", key_path=f"{KEY}.hf_config")
    try:
        if preset is not None:
            base = load_model_preset(str(preset))
        elif hf is not None:
            path = Path(str(hf))
            base = load_hf_config(str(path if path.is_absolute() or file is None else Path(file).parent / path))
        else:
            return build(ModelSpec, fields, key_prefix=KEY)
    except UserError as err:
        where = f"{KEY}.{'preset' if preset is not None else 'hf_config'}"
        raise UserError(err.message, key_path=where) from None
    if not fields:
        return base
    return build(ModelSpec, {**base.model_dump(exclude_defaults=True), **fields}, key_prefix=KEY)


def check_speculative(model: ModelSpec, serving: ServingConfig | None, file: str | None) -> None:
    """The draft must fit the context: with learned positions the target (verify) and the draft model embed positions
    up to ``input_len + output_len - 1 + k``."""
    spec = serving.speculative if serving is not None else None
    if spec is None:
        return
    k = spec.num_speculative_tokens
    longest = serving.input_len + serving.output_len + k
    for who, m, key in ((f"model {model.name}", model, "serving.speculative.num_speculative_tokens"),
                        ("the draft model", draft_model_of(serving, file), KEY)):
        if m is not None and m.position_embedding == "learned" and longest > m.max_position:
            raise UserError(f"a draft of {k} tokens past input_len {serving.input_len} + output_len "
                            f"{serving.output_len} reaches position {longest}, but {who} has learned positions for "
                            f"at most {m.max_position} (max_position): the draft is longer than the context",
                            key_path=key)
