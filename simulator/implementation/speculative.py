"""``serving.speculative:``: speculative decoding (docs/speculative.md).

Each decode iteration drafts ``num_speculative_tokens`` (k) tokens per sequence, then the target verifies them in
one forward over k + 1 tokens per sequence and keeps the accepted prefix plus one token of its own. Drafters:

- ``mtp``: the model's own multi-token-prediction module(s) (``model.mtp_layers``; DeepSeek-V3), run k times (vLLM
  and SGLang reuse the one module of DeepSeek-V3 for every draft position);
- ``eagle`` / ``eagle3``: an EAGLE draft head, one decoder layer of the target's width fed the target's hidden state
  (EAGLE-1/2: a 2h -> h projection of hidden state and token embedding, the target's LM head; EAGLE-3: a 3h -> h
  projection of three hidden states and an own LM head over a ``draft_vocab``-token vocabulary);
- ``draft_model``: a separate small model (``draft_model``: a mapping as ``model:``, a preset, an ``hf_config`` or
  inline fields), run k times.

Acceptance: ``acceptance_rate`` a (every position), a list (a_1..a_k: the probability that draft token i is accepted
given that tokens 1..i-1 were), or ``acceptance_length`` E (tokens per iteration, the bonus token included, as the
EAGLE papers report tau).

Tree drafts (SGLang's EAGLE worker, sgl-project/sglang python/sglang/srt/speculative/eagle_worker.py, the April-2025
version read through the code index): ``topk`` branches per node (``--speculative-eagle-topk``), k = the tree's depth
(``--speculative-num-steps``), ``num_draft_tokens`` tree nodes verified per sequence, the root (the last accepted
token) included (``--speculative-num-draft-tokens``; ``organize_draft_results`` keeps the ``num_draft_tokens - 1``
best-scored of the ``topk + (k - 1) topk^2`` drafted nodes). A chain is ``topk`` 1 with ``num_draft_tokens`` k + 1.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.errors import UserError

#: the longest draft modelled (vLLM and SGLang configurations use 1-8; EAGLE-2 trees draft up to ~10 deep)
MAX_SPECULATIVE_TOKENS = 64
#: the widest draft tree modelled (SGLang's auto-chosen trees use top-k 1-8: server_args auto_choose_speculative_params)
MAX_TOPK = 64
#: the most tokens one verify forward runs per sequence (SGLang's EAGLE examples verify up to 64)
MAX_DRAFT_TOKENS = 1024
#: EAGLE-3's draft vocabulary: the released heads' ``draft_vocab_size`` (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B
#: config.json: 32000; EAGLE-3 paper, Li et al. 2025, Sec. 3: a reduced vocabulary for the draft's LM head)
EAGLE3_DRAFT_VOCAB = 32_000

_KEY = "serving.speculative"


class SpeculativeConfig(BaseModel):
    """How decode speculates (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["mtp", "eagle", "eagle3", "draft_model"] = Field(
        description="drafter: mtp (the model's MTP modules), eagle / eagle3 (an EAGLE draft head of one decoder "
                    "layer) or draft_model (a separate model given under draft_model)")
    num_speculative_tokens: int = Field(ge=1, le=MAX_SPECULATIVE_TOKENS,
                                        description="k: tokens drafted per sequence and iteration")
    acceptance_rate: float | tuple[float, ...] | None = Field(
        None, description="per-position acceptance in [0, 1]: one value for every position, or k values (position "
                          "i accepted given 1..i-1 were); or give acceptance_length")
    acceptance_length: float | None = Field(
        None, ge=1, le=MAX_SPECULATIVE_TOKENS + 1,
        description="mean tokens per iteration (accepted drafts + the target's own token), 1 .. k + 1; or give "
                    "acceptance_rate")
    draft_model: dict[str, Any] | None = Field(
        None, description="method draft_model: the draft model as model: takes it (preset, hf_config or fields)")
    draft_vocab: int | None = Field(
        None, ge=2, le=10_000_000, description=f"eagle3: the draft head's vocabulary (default {EAGLE3_DRAFT_VOCAB:,})")
    topk: int = Field(1, ge=1, le=MAX_TOPK, description="draft tree branches per node (SGLang --speculative-eagle-topk);"
                                                       " each draft pass after the first runs topk rows per sequence")
    num_draft_tokens: int | None = Field(
        None, ge=2, le=MAX_DRAFT_TOKENS,
        description="tree nodes the verify forward runs per sequence, the root included (SGLang "
                    "--speculative-num-draft-tokens); null: k + 1 (a chain)")
    draft_extend_graph: bool = Field(
        True, description="the draft's first pass over the accepted tokens replays a CUDA graph (SGLang since PR #6606, "
                          "2025-05-26); false: issued eagerly (SGLang before it)")

    @model_validator(mode="after")
    def _tree(self):
        k, n = self.num_speculative_tokens, self.num_draft_tokens
        if n is None:
            return self
        nodes = self.topk + (k - 1) * self.topk ** 2
        if n < k + 1:
            raise UserError(f"num_draft_tokens {n} is fewer than the k + 1 = {k + 1} tokens of one path through a tree "
                            f"of depth num_speculative_tokens {k}: the deeper drafts would all be discarded (SGLang "
                            "server_args.py: speculative_num_steps < speculative_num_draft_tokens)",
                            key_path=f"{_KEY}.num_draft_tokens")
        if n > nodes + 1:
            raise UserError(f"num_draft_tokens {n} is more than the root and the {nodes} nodes a tree of depth {k} and "
                            f"topk {self.topk} drafts (topk + (k - 1) x topk^2)", key_path=f"{_KEY}.num_draft_tokens")
        return self

    @model_validator(mode="after")
    def _acceptance(self):
        k = self.num_speculative_tokens
        if (self.acceptance_rate is None) == (self.acceptance_length is None):
            raise UserError("give exactly one of acceptance_rate and acceptance_length",
                            key_path=f"{_KEY}.acceptance_rate")
        rates = self.acceptance_rate
        if isinstance(rates, tuple):
            if len(rates) != k:
                raise UserError(f"{len(rates)} per-position acceptance rates for num_speculative_tokens {k}: give "
                                f"one per drafted position ({k}), or one value for all",
                                key_path=f"{_KEY}.acceptance_rate")
        elif rates is not None:
            rates = (rates,)
        bad = [r for r in rates or () if not 0.0 <= r <= 1.0]
        if bad:
            raise UserError(f"an acceptance rate is a probability in [0, 1], got {bad[0]:g}",
                            key_path=f"{_KEY}.acceptance_rate")
        if self.acceptance_length is not None and self.acceptance_length > k + 1:
            raise UserError(f"acceptance_length {self.acceptance_length:g} is more than the k + 1 = {k + 1} tokens "
                            "an iteration can yield", key_path=f"{_KEY}.acceptance_length")
        if self.topk > 1 and self.acceptance_rate is not None:
            raise UserError(f"a per-position acceptance rate describes a chain; a tree (topk {self.topk}) takes "
                            "acceptance_length (the engines' mean accept length)", key_path=f"{_KEY}.acceptance_rate")
        return self

    def verified_tokens(self) -> int:
        """Tokens the verify forward runs per sequence: ``num_draft_tokens``, or k + 1 for a chain."""
        return self.num_draft_tokens or self.num_speculative_tokens + 1

    @model_validator(mode="after")
    def _drafter(self):
        if (self.method == "draft_model") != (self.draft_model is not None):
            raise UserError("method draft_model needs draft_model: (preset, hf_config or fields), and only it takes "
                            "one", key_path=f"{_KEY}.draft_model")
        if self.draft_vocab is not None and self.method != "eagle3":
            raise UserError("draft_vocab is the EAGLE-3 head's own vocabulary: only method eagle3 takes it",
                            key_path=f"{_KEY}.draft_vocab")
        return self

    def expected_tokens(self) -> float:
        """Tokens one iteration yields per sequence: ``E = 1 + sum_{i=1..k} prod_{j<=i} a_j`` (the accepted prefix of
        the draft plus the target's own token; Leviathan et al. 2023, "Fast Inference from Transformers via
        Speculative Decoding", eq. 1: ``(1 - a^(k+1)) / (1 - a)`` for one a), or ``acceptance_length`` as given."""
        if self.acceptance_length is not None:
            return self.acceptance_length
        k = self.num_speculative_tokens
        rates = self.acceptance_rate if isinstance(self.acceptance_rate, tuple) else (self.acceptance_rate,) * k
        total, run = 1.0, 1.0
        for a in rates:
            run *= a
            total += run
        return total
