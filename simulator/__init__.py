"""Analytical cost model for distributed LLM training: per-GPU memory per pipeline stage and step time.

The package import stays light (no pandas, matplotlib or networkx at import time): heavy modules are imported
by the functions that need them.
"""

__version__ = "0.1.0"
