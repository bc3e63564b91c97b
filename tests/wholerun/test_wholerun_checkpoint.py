"""A checkpoint save's terms by hand (docs/whole_run.md, "Checkpoints"): the staging of an async save (cached pinned,
pinned, pageable), who writes what (DeepSpeed's per-rank files, DCP's even shares), the busiest rank's serial
torch.save against the aggregate write, and the measured rates against the device data they come from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.scenario.run_section import CheckpointSection
from simulator.wholerun.checkpoint import (
    checkpoint_cost,
    rank_write_bytes,
    rates,
    staging_seconds,
    writer_of,
)

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "simulator" / "validation" / "data" / "h200_checkpoint" / "checkpoint_save.jsonl"
GEN5_X16 = 16 * 32e9 * 128 / 130 / 8   # 63.0 GB/s per direction
GEN4_X16 = GEN5_X16 / 2                # 31.5 GB/s


def test_the_rates_are_the_device_medians():
    """The table's constants are the medians of the largest measured state dict (5.97 GB, 89 tensors), rounded."""
    row = [json.loads(line) for line in DEVICE.read_text().splitlines()][-1]
    assert row["bytes"] == 89 * 64 * 2**20 and row["repeats"] == 3
    r = rates()
    assert r["pinned_copy_efficiency"] == pytest.approx(row["pinned_copy"]["GBps"] * 1e9 / GEN5_X16, abs=1e-3)
    assert r["pinned_alloc_Bps"] == pytest.approx(row["pinned_alloc"]["GBps"] * 1e9, rel=5e-3)
    assert r["pageable_copy_Bps"] == pytest.approx(row["pageable_copy"]["GBps"] * 1e9, rel=5e-3)
    assert r["rank_write_Bps_torch_save"] == pytest.approx(row["torch_save_gpu"]["GBps"] * 1e9, rel=5e-3)
    assert r["rank_write_Bps_dcp"] == pytest.approx(row["dcp_save"]["GBps"] * 1e9, rel=5e-3)
    # DCP's own staging helpers copy into their cached buffers at the plain pinned copy's rate
    assert row["dcp_stage_cached"]["median_s"] == pytest.approx(row["pinned_copy"]["median_s"], rel=0.02)
    # the rates hold from 0.47 GB up (the 0.07 GB row is one tensor): within 10% of the 5.97 GB medians
    rows = [json.loads(line) for line in DEVICE.read_text().splitlines()][2:]
    for key in ("pinned_copy", "pinned_alloc", "pageable_copy", "torch_save_gpu", "dcp_save"):
        for x in rows:
            assert x[key]["GBps"] == pytest.approx(row[key]["GBps"], rel=0.1), (key, x["bytes"])


def test_staging_by_hand():
    # 10 GB on a Gen5 x16 GPU: cached pinned at 0.875 x 63.0 GB/s = 55.14 GB/s: 0.1814 s
    cached = staging_seconds(10e9, "cached_pinned", GEN5_X16)
    assert cached == pytest.approx(10e9 / (0.875 * 63.0154e9), rel=1e-4)
    assert cached == pytest.approx(0.18136, abs=1e-4)
    # allocated at every save: + 10 GB / 2.11 GB/s = 4.739 s
    assert staging_seconds(10e9, "pinned", GEN5_X16) == pytest.approx(0.18136 + 4.7393, abs=1e-3)
    # pageable: 10 GB / 1.20 GB/s = 8.333 s (the copy into fresh host pages, below either PCIe link)
    assert staging_seconds(10e9, "pageable", GEN5_X16) == pytest.approx(8.3333, abs=1e-3)
    assert staging_seconds(10e9, "pageable", GEN4_X16) == pytest.approx(8.3333, abs=1e-3)
    # an A100's Gen4 link halves the cached copy's rate: 0.3627 s
    assert staging_seconds(10e9, "cached_pinned", GEN4_X16) == pytest.approx(0.36272, abs=1e-4)


def test_who_writes_what():
    from simulator.implementation.profiles import profile_named

    section = CheckpointSection()
    writers = {n: profile_named(n).checkpoint_writer for n in ("deepspeed", "megatron", "pytorch", "torchtitan")}
    assert writers == {"deepspeed": "rank_files", "megatron": "distributed", "pytorch": "distributed",
                       "torchtitan": "distributed"}
    assert writer_of(section, writers["deepspeed"]) == "rank_files"
    assert writer_of(section, writers["megatron"]) == "distributed"
    assert writer_of(CheckpointSection(writer="distributed"), writers["deepspeed"]) == "distributed"
    # DeepSpeed: data-parallel rank 0 writes its stage's full weights and its own optimizer partition, i.e. the
    # GPU's saved state; DCP: the union over the ranks, 1 TB over 64 GPUs = 15.625 GB each
    assert rank_write_bytes("rank_files", 13.9e9, 1e12, 64) == 13.9e9
    assert rank_write_bytes("distributed", 13.9e9, 1e12, 64) == pytest.approx(15.625e9)


def test_a_sync_save_waits_for_the_slower_of_the_aggregate_and_the_busiest_rank():
    # 1 TB from 10 nodes at 10 GB/s each: 10 s aggregate; the busiest DeepSpeed rank writes 13.94 GB at 0.646 GB/s:
    # 21.58 s; a DCP rank's 1 TB / 80 GPUs = 12.5 GB at 0.571 GB/s: 21.89 s
    cost = checkpoint_cost(1e12, 13.94e9, 10, GEN5_X16, CheckpointSection(), 10e9, 13.94e9, "rank_files")
    assert cost.write_s == cost.stall_s == pytest.approx(13.94 / 0.646, rel=1e-9)
    cost = checkpoint_cost(1e12, 13.94e9, 10, GEN5_X16, CheckpointSection(), 10e9, 12.5e9, "distributed")
    assert cost.write_s == pytest.approx(12.5 / 0.571, rel=1e-9)
    # a slow file system binds instead: 1 TB over 20 GB/s = 50 s
    slow = CheckpointSection(filesystem_Bps=20e9)
    assert checkpoint_cost(1e12, 13.94e9, 10, GEN5_X16, slow, 10e9, 13.94e9, "rank_files").write_s == 50.0
    # an achieved per-rank rate overrides the measured one: 13.94 GB at 0.35 GB/s = 39.83 s
    given = CheckpointSection(rank_write_Bps=0.35e9)
    assert checkpoint_cost(1e12, 13.94e9, 10, GEN5_X16, given, 10e9, 13.94e9, "rank_files").write_s == \
        pytest.approx(39.829, abs=1e-3)


def test_async_stalls_for_the_staging_and_writes_behind():
    section = CheckpointSection(mode="async", staging="pinned")
    cost = checkpoint_cost(1e12, 10e9, 10, GEN5_X16, section, 10e9, 12.5e9, "distributed")
    assert cost.stall_s == pytest.approx(0.18136 + 4.7393, abs=1e-3)
    assert cost.write_s == pytest.approx(12.5 / 0.571, rel=1e-9)
    memory = checkpoint_cost(1e12, 10e9, 10, GEN5_X16, CheckpointSection(mode="in_memory"), 10e9, 12.5e9)
    assert memory.stall_s == memory.write_s == memory.load_s == pytest.approx(0.18136, abs=1e-4)


@pytest.mark.parametrize("framework, zero, per_param", [
    ("deepspeed", 3, 12),   # ZeRO-3: fp32 partitions (4 B) + two fp32 moments (8 B), no 16-bit weights
    ("deepspeed", 1, 14),   # ZeRO-1: the stage's 16-bit layer files (2 B) as well
    ("pytorch", 3, 14),     # DCP saves the model's state dict: the weights (2 B) beside the master copy and moments
])
def test_deepspeed_zero3_saves_no_16bit_weights(framework, zero, per_param):
    """DeepSpeed's ZeRO-3 frees each partitioned parameter to an empty tensor, so its checkpoint carries the fp32
    partitions and the moments only: 12 B per parameter for fp16 with Adam (4 + 8), against 14 B (2 + 4 + 8) where
    the weights are written. The busiest DeepSpeed rank then writes its even partition, total / GPUs."""
    from simulator import load_scenario
    from simulator.model.params import param_counts
    from simulator.wholerun.checkpoint import checkpoint_bytes, weights_saved

    rp = load_scenario({"name": "zero3", "system": {"profile": "dgx_a100_80gb", "nodes": 2},
                        "model": {"preset": "gpt3-175b"}, "parallel": {"dp": 16, "zero": zero},
                        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 16, "precision": "fp16",
                                     "framework": framework}}).plan
    writer = rp.training.profile.checkpoint_writer
    params = param_counts(rp.model)["total"]
    assert checkpoint_bytes(rp, writer) == pytest.approx(params * per_param, rel=1e-12)
    assert weights_saved(rp, writer) is (per_param == 14)
    assert rank_write_bytes(writer, 99e9, 12 * params, 16, weights=False) == pytest.approx(12 * params / 16)


def test_per_tensor_rate_is_the_cached_pinned_save_less_its_copy():
    """state_dict_s_per_tensor from async_save_staging.jsonl: at 80 blocks (723 parameters + 2,169 AdamW tensors),
    get_state_dict + async_save with cached pinned staging took 0.1237 s; its 3 x 180.5 MB (weights and two moments,
    fp32) at the cached copy's 55.1 GB/s take 9.8 ms; (0.1237 - 0.0098) / 2,892 = 39.4 us. The 20-block point (732
    tensors, 44.2 us) agrees within 15%, and get_state_dict alone is under half of it."""
    rows = [json.loads(line) for line in (DEVICE.parent / "async_save_staging.jsonl").read_text().splitlines()]
    at = {(r.get("layers"), r["part"]): r for r in rows if r.get("hidden") == 256}

    def per_tensor(layers: int) -> float:
        row = at[(layers, "async_save_cached_pinned")]
        tensors = row["params"] + row["opt_state_tensors"]
        return (row["median_s"] - 3 * row["param_bytes"] / (0.875 * GEN5_X16)) / tensors

    assert at[(80, "async_save_cached_pinned")]["params"] == 723
    assert rates()["state_dict_s_per_tensor"] == pytest.approx(per_tensor(80), rel=0.005)
    assert per_tensor(20) == pytest.approx(per_tensor(80), rel=0.15)
    assert at[(80, "get_state_dict")]["median_s"] / 2892 < 0.5 * per_tensor(80)


def test_async_stall_adds_the_rank_tensors_by_hand():
    """Llama-3-70B's shard on one of 1856 GPUs: 846.6 GB / 1856 = 0.456 GB; cached pinned 0.456 / 55.1 GB/s = 8.27 ms,
    plus 2,892 entries x 39.4 us = 0.1139 s: 0.1222 s; pageable 0.456 / 1.20 GB/s = 0.380 s + 0.1139 = 0.494 s."""
    gpu_bytes, tensors = 846.6e9 / 1856, 2892
    assert staging_seconds(gpu_bytes, "cached_pinned", GEN5_X16, tensors) == pytest.approx(0.1222, abs=3e-4)
    assert staging_seconds(gpu_bytes, "pageable", GEN5_X16, tensors) == pytest.approx(0.4941, abs=3e-4)
    assert staging_seconds(gpu_bytes, "pageable", GEN5_X16) == pytest.approx(0.3801, abs=3e-4)



def test_rank_state_tensors_by_hand():
    """scenarios/llama3_70b_run_h200.yaml (Llama-3-70B at PP 2, AdamW): the busiest stage holds 40 layers of 9
    tensors (input norm, q, k, v, o, post-attention norm, gate, up, down) and the head's 2 (final norm, output layer;
    the embedding is 1): 362 parameters x (1 + 2 moments + step) = 1,448 state-dict entries, 57 ms at 39.4 us."""
    from simulator import load_scenario
    from simulator.wholerun.checkpoint import rank_state_tensors

    rp = load_scenario(str(ROOT / "scenarios" / "llama3_70b_run_h200.yaml")).plan
    assert (rp.parallel.pp, rp.model.layers) == (2, 80)
    assert rank_state_tensors(rp) == (40 * 9 + 2) * 4 == 1448
