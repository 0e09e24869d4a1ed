"""SnapKV baseline (arXiv 2404.14469): select once at the end of prefill, then let the cache grow.

As in the original code, the budget (``capacity``) includes the observation window, which is always kept; the
other ``budget - observation`` slots go to the highest-scoring earlier prompt tokens (no sinks). Decoded tokens are
appended, so the cache grows by one slot per token. A method of the scored-selection base
(:mod:`snapeval.cache.selection`): its score and its window.
"""
from __future__ import annotations

from snapeval.cache.base import CompressedKVCache
from snapeval.cache.config import SnapKVConfig
from snapeval.cache.scoring import observation_scores
from snapeval.cache.selection import ScoredSelectionLayer


class SnapKVLayer(ScoredSelectionLayer):
    config: SnapKVConfig

    def window(self) -> int:
        return self.config.observation

    def score(self, prompt, candidate):
        cfg = self.config
        return observation_scores(prompt, candidate, cfg.observation, pool_kernel=cfg.pool_kernel, pooling=cfg.pooling)


class SnapKVCache(CompressedKVCache):
    """SnapKV KV cache: ``SnapKVCache(model, SnapKVConfig(budget=1024))``."""

    layer_class = SnapKVLayer
    config_class = SnapKVConfig
