"""``serving.workload:``: the request stream of ``simulator serve --bench`` (docs/serving/bench.md).

Request lengths (input and output) each from a distribution, or both from a CSV of ``input,output`` rows; a
prefix-cache hit rate; an arrival process (Poisson, constant, gamma, or a CSV of timestamps); a seed. Left out,
every request has ``serving.input_len`` / ``serving.output_len`` tokens and all arrive at t = 0 (``vllm bench serve
--request-rate inf``, the benchmark's default).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: longest request side a distribution may draw (tokens); draws are rounded and clipped to [1, MAX_TOKENS]
MAX_TOKENS = 10_000_000
#: largest CSV (lengths or timestamps) read, bytes
MAX_CSV_BYTES = 16 * 2**20

#: parameters each distribution needs (the others are refused)
LENGTH_PARAMS = {"fixed": ("value",), "uniform": ("low", "high"), "normal": ("mean", "std"),
                 "lognormal": ("median", "sigma")}


class LengthDistribution(BaseModel):
    """Tokens per request on one side (input or output)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    distribution: Literal["fixed", "uniform", "normal", "lognormal"] = Field(
        description="fixed (value), uniform integers in [low, high], normal (mean, std) or lognormal (median = "
                    "exp(mu), sigma of the log); draws rounded to whole tokens and clipped to [1, 10,000,000]")
    value: int | None = Field(None, ge=1, le=MAX_TOKENS, description="fixed: tokens per request")
    low: int | None = Field(None, ge=1, le=MAX_TOKENS, description="uniform: least tokens")
    high: int | None = Field(None, ge=1, le=MAX_TOKENS, description="uniform: most tokens")
    mean: float | None = Field(None, ge=1, le=MAX_TOKENS, description="normal: mean tokens")
    std: float | None = Field(None, ge=0, le=MAX_TOKENS, description="normal: standard deviation, tokens")
    median: float | None = Field(None, ge=1, le=MAX_TOKENS, description="lognormal: median tokens (exp(mu))")
    sigma: float | None = Field(None, ge=0, le=10, description="lognormal: standard deviation of ln(tokens)")

    @model_validator(mode="after")
    def _parameters(self):
        need = LENGTH_PARAMS[self.distribution]
        given = {k for k in ("value", "low", "high", "mean", "std", "median", "sigma") if getattr(self, k) is not None}
        missing = [k for k in need if k not in given]
        if missing:
            raise ValueError(f"distribution {self.distribution} needs {', '.join(need)}; missing {', '.join(missing)}")
        extra = sorted(given - set(need))
        if extra:
            raise ValueError(f"distribution {self.distribution} takes {', '.join(need)}, not {', '.join(extra)}")
        if self.distribution == "uniform" and self.low > self.high:
            raise ValueError(f"uniform: low ({self.low}) must be at most high ({self.high})")
        return self


class ArrivalProcess(BaseModel):
    """When requests reach the system (vLLM ``bench serve --request-rate`` / ``--burstiness``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    process: Literal["poisson", "constant", "gamma", "csv"] = Field(
        "poisson", description="poisson (exponential gaps), constant (gaps of 1/rate), gamma (gaps of mean 1/rate "
                               "and shape `shape`: below 1 burstier than Poisson, 1 is Poisson) or csv (`path`: one "
                               "arrival time in seconds per line)")
    rate: float | None = Field(None, gt=0, le=1e9, description="requests/s to the whole system; null: every "
                                                              "request at t = 0 (--request-rate inf)")
    shape: float | None = Field(None, gt=0, le=1e6, description="gamma: shape of the gap distribution "
                                                              "(vLLM --burstiness)")
    path: str | None = Field(None, description="csv: file of arrival times (s), relative to the scenario file")

    @model_validator(mode="after")
    def _parameters(self):
        if self.process == "gamma" and self.shape is None:
            raise ValueError("process gamma needs shape (1 is Poisson; below 1 burstier)")
        if self.process != "gamma" and self.shape is not None:
            raise ValueError(f"shape is a parameter of process gamma, not {self.process}")
        if self.process == "csv":
            if self.path is None:
                raise ValueError("process csv needs path (one arrival time in seconds per line)")
            if self.rate is not None:
                raise ValueError("process csv takes its times from the file: leave rate out")
        elif self.path is not None:
            raise ValueError(f"path is a parameter of process csv, not {self.process}")
        if self.process in ("constant", "gamma") and self.rate is None:
            raise ValueError(f"process {self.process} needs rate (requests/s)")
        return self


class SharedPrefix(BaseModel):
    """Requests in ``groups`` groups whose prompts start with the group's ``prefix_len`` tokens (SGLang
    bench_serving's generated-shared-prefix dataset: ``--gsp-num-groups``, ``--gsp-system-prompt-len``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    groups: int = Field(ge=1, le=1_000_000, description="prefix groups; request i belongs to group i mod groups")
    prefix_len: int = Field(ge=1, le=MAX_TOKENS, description="tokens of each group's shared prefix, added before "
                                                             "each request's own input tokens")


class Workload(BaseModel):
    """The request stream ``simulator serve --bench`` simulates (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: LengthDistribution | None = Field(None, description="prompt tokens per request; null: serving.input_len")
    output: LengthDistribution | None = Field(None, description="output tokens per request; null: "
                                                                "serving.output_len")
    lengths_csv: str | None = Field(None, description="CSV of input,output token counts, one request per row "
                                                      "(used in order, repeated when shorter than num_requests), "
                                                      "relative to the scenario file; excludes input and output")
    prefix_hit_rate: float = Field(0.0, ge=0, le=1, description="share of each prompt's tokens whose K/V is already "
                                                                "cached (whole pages, at least one prompt token "
                                                                "computed): they skip prefill but occupy the cache")
    shared_prefix: SharedPrefix | None = Field(
        None, description="shared-prefix groups {groups, prefix_len}: every prompt is its group's prefix plus its "
                          "own input; from the group's second request on the prefix's K/V is cached (whole pages)")
    arrival: ArrivalProcess = Field(default_factory=ArrivalProcess, description="arrival process")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="seed of numpy's Generator for lengths and arrivals")

    @model_validator(mode="after")
    def _one_source_of_lengths(self):
        if self.lengths_csv is not None and (self.input is not None or self.output is not None):
            raise ValueError("lengths_csv gives both input and output lengths: leave input and output out")
        return self
