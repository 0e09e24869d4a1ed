"""The scored-selection base: a method that keeps, at the end of prefill, the highest-scoring prompt tokens of each
row, per layer and KV head, and appends every decoded token (SnapKV's shape; kvpress's ``ScorerPress`` is the same
idea).

A selection method is three things in its own file (``CONTRIBUTING.md``):

- its settings: a frozen dataclass subclassing :class:`~snapeval.cache.config.SelectionConfig` (a ``budget`` and
  each setting declared once with :func:`~snapeval.cache.config.setting`);
- its layer: a :class:`ScoredSelectionLayer` subclass whose :meth:`~ScoredSelectionLayer.score` ranks the candidate
  tokens (optionally :meth:`~ScoredSelectionLayer.sinks`, :meth:`~ScoredSelectionLayer.window` and
  :meth:`~ScoredSelectionLayer.forced` say what is always kept), and a :class:`~snapeval.cache.base.CompressedKVCache`
  naming the two;
- its entry (:class:`~snapeval.cache.methods.MethodInfo`).

The base does the rest: the budget (checked by the configuration, :func:`~snapeval.cache.config.check_budget`), a row
that fits kept whole, the sinks and the window forced, top-``budget`` per KV head (ties to the earlier token, so a
choice never depends on a row's padding), left padding (scores are read on real tokens only, positions are each
row's own), and the decode path (decoded tokens appended, static rows for the engine).
"""
from __future__ import annotations

import torch

from snapeval.cache.base import CompressedLayer, LayerPrompt, SlotRule


def top_indices(scores: torch.Tensor, candidate: torch.Tensor, k: int) -> torch.Tensor:
    """Top-``k`` candidate indices per row and head, ascending, -1 where fewer than ``k`` candidates exist.

    ``scores`` ``[B, H, L]`` (``-inf``: never kept); ``candidate`` ``[B, L]`` bool; returns ``[B, H, k]`` int64. Ties
    (max pooling makes plateaus) go to the earlier token, so the choice does not depend on a row's padding.
    """
    length = scores.shape[-1]
    masked = scores.masked_fill(~candidate[:, None, :], float("-inf"))
    values, index = masked.sort(dim=-1, descending=True, stable=True)
    values, index = values[..., :k], index[..., :k]
    index = torch.where(values > float("-inf"), index, length).sort(dim=-1).values
    return index.masked_fill(index == length, -1)


def edge_tokens(prompt: LayerPrompt, sinks: int, window: int) -> torch.Tensor:
    """``[B, L]`` bool: each row's first ``sinks`` and last ``window`` real tokens (its own positions, after its left
    padding)."""
    position = prompt.positions()
    return (position >= 0) & ((position < sinks) | (position >= prompt.lengths[:, None] - window))


class ScoredSelectionLayer(CompressedLayer):
    """One layer of a scored-selection cache: a subclass writes :meth:`score` (and, if it needs them, :meth:`sinks`,
    :meth:`window`, :meth:`forced`); everything else is here. ``config.budget`` is the slots per layer and KV head
    the prompt may keep; decoded tokens are appended after them."""

    appends = True

    # --- what a method says ------------------------------------------------------------------------------------
    def score(self, prompt: LayerPrompt, candidate: torch.Tensor) -> torch.Tensor:
        """``[B, Hkv, L]`` float scores of the prompt's tokens (higher: kept first; ``-inf``: never kept); only the
        ``candidate`` ``[B, L]`` entries are read. ``prompt`` holds the keys, values, last queries and padding
        (:class:`~snapeval.cache.base.LayerPrompt`)."""
        raise NotImplementedError

    def sinks(self) -> int:
        """The first tokens of each row, always kept (0: none)."""
        return 0

    def window(self) -> int:
        """The last tokens of each row, always kept (0: none)."""
        return 0

    def forced(self, prompt: LayerPrompt) -> torch.Tensor | None:
        """``[B, L]`` bool: further tokens always kept, besides the sinks and the window (None: none)."""
        return None

    # --- what the base does ------------------------------------------------------------------------------------
    def kept_mask(self, prompt: LayerPrompt) -> torch.Tensor:
        """``[B, L]`` bool: the tokens kept before any score is read: a row that fits the budget whole, else its
        sinks, its window and :meth:`forced`."""
        fits = (prompt.lengths <= self.config.budget)[:, None]
        kept = fits | edge_tokens(prompt, self.sinks(), self.window())
        extra = self.forced(prompt)
        if extra is not None:
            kept = kept | extra
        return prompt.key_valid & kept

    def select(self, prompt: LayerPrompt) -> torch.Tensor:
        """``[B, Hkv, S]`` the kept indices: the forced tokens, then the best-scored candidates, ``min(budget, L)``
        per row and KV head at most; ``S`` is the most any row keeps (-1 pads the others)."""
        batch, num_heads, length, _ = prompt.keys.shape
        forced = self.kept_mask(prompt)
        scores = torch.zeros(batch, num_heads, length, device=prompt.keys.device)
        if bool((prompt.lengths > self.config.budget).any()):
            scores = self.score(prompt, prompt.key_valid & ~forced).float()
        scores = scores.masked_fill(forced[:, None, :], float("inf"))
        index = top_indices(scores, prompt.key_valid, min(self.config.budget, length))
        used = int((index >= 0).sum(dim=-1).max()) if index.numel() else 0
        return index[..., :used] if used < index.shape[-1] else index

    def slot_rule(self) -> SlotRule:
        return SlotRule(appends=True)

    def write(self, key, value, position):
        if self.static:  # rows allocated once: the next free slot of each row (a parked row rewrites its last slot)
            self.write_slot(self.fill.clamp(max=self.keys.shape[2] - 1), key, value, position)
            self.fill += 1
            return
        self.fill += 1
        self.keys = torch.cat([self.keys, key], dim=2)
        self.values = torch.cat([self.values, value], dim=2)
        heads = key.shape[1]
        self.positions = torch.cat([self.positions, position[:, None, None].expand(-1, heads, 1)], dim=2)
