"""The K/V cache of sliding-window layers under a serving engine's cache manager (``serving.sliding_window_cache``;
docs/serving/sliding_window.md).

A windowed layer's attention reads only the last ``w`` keys, so an engine may free the older ones. Per sequence of
``T`` tokens on a model of ``L`` layers, ``L_w`` of them windowed at ``w`` tokens, with pages of ``b`` tokens
(``n = ceil(T / b)`` pages):

- ``full``: every layer holds ``n`` pages (an engine that allocates all layers alike: vLLM with
  ``--disable-hybrid-kv-cache-manager``, vLLM before v0.10.0's hybrid allocator);
- ``window`` (vLLM V1's hybrid KV cache manager, v0.10.0 on, not re-checked against the release notes): a windowed
  layer holds at most ``c = ceil((w - 1) / b) + 1`` pages: vllm-project/vllm
  ``vllm/v1/core/single_type_kv_cache_manager.py`` ``SlidingWindowManager.remove_skipped_blocks`` @ 002f34915134
  frees every page wholly before token ``computed - w + 1`` (the ``w - 1`` older keys plus the new token, on a page
  boundary or not);
- ``swa_pool`` (SGLang's ``SWAKVPool``, sgl-project/sglang ``python/sglang/srt/mem_cache/swa_memory_pool.py`` @
  dec8155f6d07): full and windowed layers get separate token pools, the windowed one ``r = swa_full_tokens_ratio``
  (0.8 by default, ``server_args.py``) times the full one's tokens; a sequence takes ``T`` tokens of the full pool
  and ``min(T, c x b)`` of the windowed one, so the binding pool gives ``(L - L_w + r L_w) x max(n, min(n, c) / r)``
  layer-pages.

Counted here in full-equivalent tokens (tokens of a cache whose every layer holds them): ``held(T) x b`` with
``held`` the layer-pages above over ``L``. The shares are the whole model's (each pipeline stage is taken to hold
the model's mix of windowed and full layers; exact at pp = 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: SGLang's default size of the sliding-window pool over the full one (sgl-project/sglang
#: python/sglang/srt/server_args.py ``swa_full_tokens_ratio: float = 0.8``)
SGLANG_SWA_FULL_TOKENS_RATIO = 0.8

#: ``serving.sliding_window_cache`` values
MODES = ("full", "window", "swa_pool")


@dataclass(frozen=True)
class KvWindow:
    """How one sequence's K/V cache grows under windowed layers (module docstring): ``windowed`` the share of layers
    with a window of ``window`` tokens, ``cap_pages`` the pages a windowed layer holds at most between steps,
    ``block`` tokens per page, ``pool_ratio`` the windowed pool's size over the full one's (``swa_pool``; None: one
    shared pool)."""

    windowed: float
    window: int
    cap_pages: int
    block: int
    pool_ratio: float | None = None

    def pages(self, n, window_pages=None):
        """Full-equivalent pages (fractional) of a sequence that spans ``n`` pages (int or array) while its windowed
        layers hold ``window_pages`` (default ``min(n, cap_pages)``: between steps)."""
        capped = np.minimum(n, self.cap_pages) if window_pages is None else window_pages
        if self.pool_ratio is None:
            return (1.0 - self.windowed) * n + self.windowed * capped
        r = self.pool_ratio
        return (1.0 - self.windowed + r * self.windowed) * np.maximum(n, capped / r)

    def step_pages(self, tokens, computed):
        """Full-equivalent pages while a step extends a sequence to ``tokens`` after ``computed`` tokens: the
        engine frees a windowed layer's pages before token ``computed - window + 1`` and then allocates up to
        ``tokens`` (vLLM ``KVCacheManager.allocate_slots``: ``remove_skipped_blocks``, then new pages; vllm-project/vllm
        PR #14097's chunked-prefill example), so a prefill chunk of C tokens briefly holds about
        ``(window - 1 + C) / block`` pages on a windowed layer."""
        n = np.ceil(np.asarray(tokens) / self.block)
        skipped = np.floor(np.maximum(0, np.asarray(computed) - self.window + 1) / self.block)
        return self.pages(n, np.minimum(n, n - skipped))

    def tokens(self, tokens: float) -> float:
        """Full-equivalent tokens a sequence of ``tokens`` holds between steps (its pages rounded up)."""
        return float(self.pages(math.ceil(tokens / self.block))) * self.block


def kv_window_of(model, mode: str, block: int) -> KvWindow | None:
    """The cache rule of ``model`` under ``mode`` (module docstring); None when every layer holds every token
    (``full``, or no windowed layer)."""
    windows = [model.attention_window(i) for i in range(model.layers)]
    sizes = {w for w in windows if w is not None}
    if mode == "full" or not sizes:
        return None
    w = max(sizes)  # one window size per model (ModelSpec.sliding_window)
    cap = math.ceil((w - 1) / block) + 1
    share = sum(x is not None for x in windows) / model.layers
    return KvWindow(share, w, cap, block, SGLANG_SWA_FULL_TOKENS_RATIO if mode == "swa_pool" else None)
