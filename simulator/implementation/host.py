"""``serving.host:``: what a serving engine pays on the CPU, per step and per request (docs/engine_host.md).

The engine profiles (``frameworks/vllm.yaml``, ``sglang.yaml``, ``tensorrt_llm.yaml``) give it in their
``serving_defaults`` with each value's source; a scenario may override any field. Priced in the serving loop
(:mod:`simulator.serving.host`):

- the engine core's host time of a step, ``step_s + seq_s x sequences in the step`` (scheduling, input preparation,
  the sampler's CPU side, output processing), ADDED to the GPU step when the engine runs them one after the other
  (vLLM V1 without ``--async-scheduling``), or overlapped with it (``overlap``: the step takes ``max(GPU, host)``;
  vLLM ``--async-scheduling``, SGLang's and TensorRT-LLM's overlap schedulers);
- the API server in its own process (vLLM V1's AsyncLLM frontend, SGLang's tokenizer and detokenizer managers): each
  decoding sequence's token costs ``token_s`` there (detokenization, streaming), so a step lasts at least
  ``token_s x decoding sequences``; each request costs ``request_s`` (HTTP, chat template, tokenization), one after
  another: request i reaches the engine at ``max(its arrival, the previous request's) + request_s``.

Under speculative decoding (``serving.speculative``) an engine may give up its overlap (``speculative_overlap``
false: SGLang sets ``disable_overlap_schedule`` for EAGLE, EAGLE3 and NEXTN, server_args.py): the engine core's host
time is then paid once per draft-and-verify iteration, after it (simulator/serving/speculative.py).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EngineHost(BaseModel):
    """One engine's host costs (module docstring); every field in seconds, 0 = not priced."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step_s: float = Field(0.0, ge=0, le=1.0, description="engine core host time per step, whatever its batch (s)")
    seq_s: float = Field(0.0, ge=0, le=0.01, description="engine core host time per sequence scheduled in a step "
                                                          "(s): input preparation, sampling, output processing")
    overlap: bool = Field(False, description="the host work of a step runs while the GPU runs the previous one "
                                             "(step = max(GPU, host)); false: one after the other (GPU + host)")
    token_s: float = Field(0.0, ge=0, le=0.01, description="API server time per streamed output token (s), in its "
                                                            "own process: a step lasts at least this x its decodes")
    speculative_overlap: bool = Field(True, description="under speculative decoding the engine keeps its overlap "
                                                          "setting; false: it runs host and GPU one after the other")
    request_s: float = Field(0.0, ge=0, le=10.0, description="API server time per request (s): HTTP, chat template, "
                                                              "tokenization, one request after another")

    def speculating(self) -> EngineHost:
        """The host as it runs under speculative decoding: without overlap where the engine gives it up."""
        return self if self.speculative_overlap else self.model_copy(update={"overlap": False})

    def engine_s(self, gpu_s: float, seqs: int, decodes: int) -> float:
        """A step of ``gpu_s`` seconds on the GPU that schedules ``seqs`` sequences, ``decodes`` of them emitting a
        token: the engine core's host time added or overlapped, then at least the API server's token work."""
        host = self.step_s + self.seq_s * seqs
        engine = max(gpu_s, host) if self.overlap else gpu_s + host
        return max(engine, self.token_s * decodes)
