"""The ``run:`` section of a scenario: what a whole training run is (docs/whole_run.md, "Inputs"; simulator/wholerun/ evaluates it).

Strict, frozen pydantic models; every field has its unit in its name (SI inside) and its bounds. Rules between
fields are checked here (``tokens`` or ``steps``, not both); the rule that needs the step time (a fixed checkpoint
interval longer than the run) is checked when the run is evaluated and names the key through :attr:`RunSection.where`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

CheckpointMode = Literal["sync", "async", "in_memory"]
StorageTarget = Literal["local_nvme", "pfs"]
Staging = Literal["cached_pinned", "pinned", "pageable"]
Writer = Literal["auto", "rank_files", "distributed"]
#: an NCCL release, MAJOR.MINOR[.PATCH] (also the failure table's releases, simulator/wholerun/failure_table.py)
NCCL_RELEASE = r"^[0-9]+\.[0-9]+(\.[0-9]+)?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RampStage(_Strict):
    """One stage of a batch ramp: the first ``tokens`` of the run at ``global_batch`` sequences per step."""

    tokens: float = Field(gt=0, description="tokens trained at this batch size")
    global_batch: int = Field(gt=0, description="sequences per optimizer step during this stage")


class CheckpointSection(_Strict):
    """``run.checkpoint``: how and how often the training state is saved."""

    mode: CheckpointMode = Field("sync", description="sync: training waits for the full write; async: it waits for the "
                                 "device-to-host copy only (PyTorch DCP async_save, Megatron --async-save); in_memory: "
                                 "it waits for the copy to host memory, kept on a peer node (Gemini-style)")
    interval_s: float | Literal["young", "daly"] = Field(
        "daly", description="productive seconds between checkpoints, or the optimum of Young (1974) or Daly (2006)")
    target: StorageTarget = Field("pfs", description="where a durable checkpoint goes: the node's local NVMe or the "
                                                    "parallel file system over the storage network")
    write_Bps_per_node: float | None = Field(
        None, gt=0, description="override of the node profile's write bandwidth to the target, bytes/s per node")
    read_Bps_per_node: float | None = Field(
        None, gt=0, description="override of the read bandwidth when loading a checkpoint, bytes/s per node "
                                "(default: the write bandwidth)")
    filesystem_Bps: float | None = Field(
        None, gt=0, description="aggregate bandwidth of the parallel file system, bytes/s (caps nodes x per-node)")
    staging: Staging = Field("cached_pinned", description="how an async or in-memory save copies the GPU's state to "
                             "the host: into pinned buffers kept from the first save (DCP async_save, Megatron "
                             "--async-save), into pinned buffers allocated at every save, or into pageable memory")
    writer: Writer = Field("auto", description="who writes what: rank_files (each rank torch.saves its own files, data-"
                           "parallel rank 0 all of its stage's weights: DeepSpeed), distributed (replicated pieces "
                           "spread over the ranks: PyTorch DCP, Megatron dist-checkpointing); auto: rank_files for "
                           "training.framework deepspeed, else distributed")
    rank_write_Bps: float | None = Field(
        None, gt=0, description="one rank's torch.save rate of GPU tensors to a durable file, bytes/s (default: "
                                "measured on the H200 host, simulator/wholerun/data/checkpoint_rates.yaml)")

    @field_validator("interval_s")
    @classmethod
    def _fixed_interval_positive(cls, value: float | str) -> float | str:
        if isinstance(value, float) and value <= 0:
            raise ValueError(f"a fixed interval must be > 0 seconds, got {value}")
        return value


class FailureRates(_Strict):
    """Per-component failure rates, failures per component per day; null keeps the table's published rate
    (simulator/wholerun/data/failure_rates.yaml)."""

    gpu: float | None = Field(None, ge=0, description="failures per GPU per day")
    host: float | None = Field(None, ge=0, description="failures per node per day (host: CPU, memory, PSU, disks)")
    nic: float | None = Field(None, ge=0, description="failures per network card per day")
    switch: float | None = Field(None, ge=0, description="failures per fabric switch per day")
    software: float | None = Field(None, ge=0, description="job-wide software failures per node per day")


class FailureSection(_Strict):
    """``run.failures``: what interrupts the job."""

    rates: FailureRates = FailureRates()
    hot_spares: int = Field(0, ge=0, description="idle spare nodes kept allocated: a failed node is swapped for a "
                                                  "spare instead of waiting for the scheduler")
    in_job_recovery: bool = Field(False, description="the surviving processes stay up and rebuild their communicators "
                                                     "(no job re-launch, no re-initialisation of the framework)")


class RestartSection(_Strict):
    """``run.restart``: overrides of the restart cost's parts, seconds (null: the sourced defaults)."""

    reschedule_s: float | None = Field(None, ge=0, description="detect the failure, drain and requeue or swap a node")
    init_s: float | None = Field(None, ge=0, description="process launch, imports, model construction")
    nccl_init_s: float | None = Field(None, ge=0, description="communicator set-up at the job's scale")
    warmup_s: float | None = Field(None, ge=0, description="slow first steps after a restart (allocator, kernels)")
    nccl_version: str | None = Field(None, pattern=NCCL_RELEASE,
                                     description="the job's NCCL release (MAJOR.MINOR[.PATCH]): which measured parts "
                                                 "of NCCL's set-up apply (null: the table's default_nccl_version)")


class MonteCarlo(_Strict):
    """``run.monte_carlo``: sample failure times instead of the analytic expectation."""

    samples: int = Field(1000, ge=1, le=100000, description="runs to sample")
    seed: int = Field(0, ge=0, description="numpy generator seed")


class RunSection(_Strict):
    """``run:``: a whole training run (docs/interface.md, the run: keys)."""

    tokens: float | None = Field(None, gt=0, description="tokens to train (or steps)")
    steps: int | None = Field(None, gt=0, description="optimizer steps to train (or tokens)")
    batch_ramp: list[RampStage] | None = Field(None, min_length=1, max_length=16, description="the run's first "
                                               "stages at smaller batches; the rest runs at training.global_batch")
    gpu_hour_price: float | None = Field(None, ge=0, description="currency units per GPU-hour")
    pue: float = Field(1.2, ge=1.0, le=3.0, description="power usage effectiveness: facility / IT energy (1.2: a "
                                                        "typical modern data centre, Uptime Institute survey 2023 "
                                                        "reports an industry average of 1.58)")
    carbon_kg_per_kWh: float | None = Field(None, ge=0, description="grid carbon intensity, kg CO2e per kWh")
    network_W_per_gpu: float = Field(0.0, ge=0, description="fabric switches' and optics' power per GPU, W")
    checkpoint: CheckpointSection = CheckpointSection()
    failures: FailureSection = FailureSection()
    restart: RestartSection = RestartSection()
    monte_carlo: MonteCarlo | None = None
    _where: dict = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _tokens_or_steps(self) -> RunSection:
        if (self.tokens is None) == (self.steps is None):
            raise ValueError("give exactly one of tokens and steps"
                             + (f" (got tokens {self.tokens:g} and steps {self.steps})" if self.tokens else ""))
        if self.batch_ramp and self.tokens is None:
            raise ValueError("batch_ramp is given in tokens: give the run's length as tokens")
        if self.batch_ramp and self.tokens is not None and sum(s.tokens for s in self.batch_ramp) >= self.tokens:
            raise ValueError(f"the batch ramp's {sum(s.tokens for s in self.batch_ramp):g} tokens leave nothing of "
                             f"the run's {self.tokens:g} at training.global_batch")
        return self

    def where(self, key_path: str) -> tuple[str | None, int | None]:
        """File and line of a ``run.`` key, as the loader recorded them (None, None without a file)."""
        return self._where.get(key_path, (None, None))

    def located(self, where: dict) -> RunSection:
        """A copy that knows where its keys were written (``key.path -> (file, line)``)."""
        copy = self.model_copy()
        copy._where = dict(where)
        return copy
