"""Calibration kit run on real GPUs: ``simulator measure collectives`` and ``simulator measure gemm``.

Plain Python files that import PyTorch lazily (inside the functions that run on a GPU), so the simulator itself
never needs torch. They write what ``simulator calibrate`` and the compute-efficiency calibration read:
nccl-tests-format logs (one file per operation and NCCL setting) and a GEMM CSV.
"""
