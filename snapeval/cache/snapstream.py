"""SnapStream (arXiv 2511.03092): compress once at the end of prefill, decode through a ring buffer.

Per layer and KV head the cache is ``[ sink | ring | top-k ]`` (``S = sink + recent + topk`` slots), allocated once
at the end of prefill and only written by index afterwards:

- ``sink``: the first ``sink`` tokens of the row, never modified;
- ``ring``: always exactly the last ``recent`` tokens of the row; 1-based token ``p`` lives in slot
  ``sink + ((p - sink) mod recent)`` (the invariant of the paper's Figure 4; its Equation 4 is a known erratum);
- ``top-k``: the ``topk`` middle prompt tokens with the highest SnapKV score, chosen per layer and per KV head from
  the last ``observation`` queries (GQA: scores averaged over the query heads of a group); never modified.

Empty slots (a prompt shorter than the budget) hold position -1 and are masked.
"""
from __future__ import annotations

import torch

from snapeval.cache.base import CompressedKVCache, SlotRule
from snapeval.cache.config import SnapStreamConfig
from snapeval.cache.scoring import observation_scores
from snapeval.cache.selection import ScoredSelectionLayer, edge_tokens, top_indices

__all__ = ["SnapStreamCache", "SnapStreamLayer", "ring_slot", "top_indices"]


def ring_slot(position: torch.Tensor, sink: int, recent: int) -> torch.Tensor:
    """Slot of the token at 0-based ``position`` (any shape): its sink slot, or its ring slot."""
    ring = sink + torch.remainder(position + 1 - sink, recent)
    return torch.where(position < sink, position, ring)


class SnapStreamLayer(ScoredSelectionLayer):
    """Its top-k part is the scored-selection base's (SnapKV's :meth:`score`, top-``topk`` per KV head of the middle);
    the sinks and the ring are laid out by position, and decoded tokens go to the ring (not appended)."""

    config: SnapStreamConfig
    appends = False

    def score(self, prompt, candidate):
        cfg = self.config
        return observation_scores(prompt, candidate, cfg.observation, pool_kernel=cfg.pool_kernel, pooling=cfg.pooling)

    def sinks(self) -> int:
        return self.config.sink

    def window(self) -> int:
        return self.config.recent

    def select(self, prompt):
        cfg = self.config
        batch, num_heads = prompt.keys.shape[:2]
        device = prompt.keys.device
        lengths, padding = prompt.lengths, prompt.padding
        lengths_ = lengths[:, None]

        sink_pos = torch.arange(cfg.sink, device=device).expand(batch, -1)
        sink_pos = sink_pos.masked_fill(sink_pos >= lengths_, -1)
        # Ring offset r holds the latest token p < L with slot(p) == sink + r (p >= sink), or nothing.
        offsets = torch.arange(cfg.recent, device=device)
        ring_pos = lengths_ - 1 - torch.remainder(lengths_ - cfg.sink - offsets, cfg.recent)
        ring_pos = ring_pos.masked_fill(ring_pos < cfg.sink, -1)
        sink_ring = torch.cat([sink_pos, ring_pos], dim=1)  # [B, sink + recent] positions
        index = torch.where(sink_ring >= 0, sink_ring + padding[:, None], -1)[:, None].expand(-1, num_heads, -1)

        return torch.cat([index, self.select_top(prompt)], dim=-1)

    def select_top(self, prompt) -> torch.Tensor:
        """``[B, Hkv, topk]`` the top-k part: the best-scored middle tokens (between the sinks and the ring: Eq. 3's
        ``K_evict``), -1 where a row has fewer."""
        cfg = self.config
        batch, num_heads, length, _ = prompt.keys.shape
        top = torch.full((batch, num_heads, cfg.topk), -1, dtype=torch.long, device=prompt.keys.device)
        if cfg.topk > 0 and bool((prompt.lengths > cfg.sink + cfg.recent).any()):
            middle = prompt.key_valid & ~edge_tokens(prompt, self.sinks(), self.window())
            top[..., : min(cfg.topk, length)] = top_indices(self.score(prompt, middle), middle, min(cfg.topk, length))
        return top

    def write(self, key, value, position):
        self.write_slot(ring_slot(position, self.config.sink, self.config.recent), key, value, position)

    def slot_rule(self) -> SlotRule:
        return SlotRule(appends=False, sink=self.config.sink, recent=self.config.recent)

    def _in_ring(self, positions: torch.Tensor, query_positions: torch.Tensor) -> torch.Tensor:
        """``[B, T, N]``: is a non-sink token at ``positions [B, N]`` still among the last ``recent`` at each query?"""
        return positions[:, None, :] > query_positions[:, :, None] - self.config.recent

    def slot_visible(self, query_positions):
        cfg = self.config
        pos = self.positions[:, 0]  # sink and ring positions are the same for every head
        is_ring = torch.zeros(pos.shape[-1], dtype=torch.bool, device=pos.device)
        is_ring[cfg.sink : cfg.sink + cfg.recent] = True
        return (pos >= 0)[:, None, :] & (~is_ring | self._in_ring(pos, query_positions))

    def new_token_visible(self, query_positions):
        is_sink = (query_positions < self.config.sink)[:, None, :]
        return is_sink | self._in_ring(query_positions, query_positions)


class SnapStreamCache(CompressedKVCache):
    """SnapStream KV cache: ``SnapStreamCache(model, SnapStreamConfig.from_budget(1024))``."""

    layer_class = SnapStreamLayer
    config_class = SnapStreamConfig
