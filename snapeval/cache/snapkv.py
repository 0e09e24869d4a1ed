"""SnapKV baseline (arXiv 2404.14469): select once at the end of prefill, then let the cache grow.

As in the original code, the budget (``capacity``) includes the observation window, which is always kept; the
other ``budget - observation`` slots go to the highest-scoring earlier prompt tokens (no sinks). Decoded tokens are
appended, so the cache grows by one slot per token.
"""
from __future__ import annotations

import torch

from snapeval.cache.base import CompressedKVCache, CompressedLayer
from snapeval.cache.config import SnapKVConfig
from snapeval.cache.scoring import pooled_scores
from snapeval.cache.snapstream import top_indices


class SnapKVLayer(CompressedLayer):
    config: SnapKVConfig
    appends = True

    def select(self, prompt):
        cfg = self.config
        batch, num_heads, length, _ = prompt.keys.shape
        keep = min(cfg.budget, length)
        key_valid, lengths_ = prompt.key_valid, prompt.lengths[:, None]
        position = prompt.positions()  # [B, L]
        window = position >= lengths_ - cfg.observation
        # Rows that fit keep everything; longer rows keep their window and score the prompt before it.
        forced = key_valid & ((lengths_ <= cfg.budget) | window)
        scores = torch.zeros(batch, num_heads, length, device=prompt.keys.device)
        if bool((prompt.lengths > cfg.budget).any()):
            candidate = key_valid & ~window
            scores = pooled_scores(prompt.window_attention(cfg.observation), candidate, kernel=cfg.kernel,
                                   pooling=cfg.pooling)
        scores = scores.masked_fill(forced[:, None, :], float("inf"))
        return top_indices(scores, key_valid, keep)

    def write(self, key, value, position):
        if self.static:  # rows allocated once: the next free slot of each row (a parked row rewrites its last slot)
            slot = self.fill.clamp(max=self.keys.shape[2] - 1)  # [B]
            heads, dim = key.shape[1], key.shape[3]
            self.keys.scatter_(2, slot[:, None, None, None].expand(-1, heads, 1, dim), key)
            self.values.scatter_(2, slot[:, None, None, None].expand(-1, heads, 1, dim), value)
            self.positions.scatter_(2, slot[:, None, None].expand(-1, heads, 1), position[:, None, None].expand(-1, heads, 1))
            self.fill += 1
            return
        self.fill += 1
        self.keys = torch.cat([self.keys, key], dim=2)
        self.values = torch.cat([self.values, value], dim=2)
        heads = key.shape[1]
        self.positions = torch.cat([self.positions, position[:, None, None].expand(-1, heads, 1)], dim=2)


class SnapKVCache(CompressedKVCache):
    """SnapKV KV cache: ``SnapKVCache(model, SnapKVConfig(budget=1024))``."""

    layer_class = SnapKVLayer
    config_class = SnapKVConfig
