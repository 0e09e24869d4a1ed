"""The uncompressed baseline: Hugging Face's own ``DynamicCache``, with the same introspection as the others."""
from __future__ import annotations

import torch
from transformers import DynamicCache

from snapeval.cache.base import CompressedKVCache
from snapeval.cache.config import FullConfig
from snapeval.cache.snapkv import SnapKVLayer


class FullCache(DynamicCache):
    """Every token kept; the cache grows by one slot per token. ``FullCache(model)``.

    ``padding`` ``[B]`` (left-padding of each row) is set by :func:`snapeval.generate` for introspection.
    """

    def __init__(self, model, config=None):
        super().__init__(config=model.config)
        self.method_config = config
        self.padding: torch.Tensor | None = None

    def load_prompt(self, prompts) -> None:
        """Hold a prompt prefilled elsewhere (one :class:`~snapeval.cache.base.LayerPrompt` per layer), as if it
        had been prefilled through this cache."""
        for layer_idx, prompt in enumerate(prompts):
            self.load_layer(layer_idx, prompt)

    def load_layer(self, index: int, prompt) -> None:
        """Hold one layer of a prompt prefilled elsewhere (:meth:`load_prompt`, one layer at a time)."""
        self.update(prompt.keys, prompt.values, index)
        if index == 0:
            self.padding = prompt.padding

    def kv_bytes(self) -> int:
        return sum(l.keys.nbytes + l.values.nbytes for l in self.layers if l.keys is not None)

    def kv_bytes_per_row(self) -> int:
        keys = self.layers[0].keys
        return self.kv_bytes() // (keys.shape[0] if keys is not None else 1)

    def slot_positions(self, layer_idx: int) -> torch.Tensor:
        keys = self.layers[layer_idx].keys
        batch, heads, length, _ = keys.shape
        padding = self.padding if self.padding is not None else torch.zeros(batch, dtype=torch.long)
        pos = torch.arange(length)[None] - padding[:, None].to(torch.long)
        return pos.masked_fill(pos < 0, -1)[:, None, :].expand(-1, heads, -1).clone()

    @property
    def compress_seconds(self) -> float:
        return 0.0


class EveryTokenLayer(SnapKVLayer):
    """Keeps every prompt token (in order) and appends decoded tokens: the full cache in the compressed-cache layout."""

    def select(self, prompt):
        length = prompt.keys.shape[2]
        heads = prompt.keys.shape[1]
        index = torch.arange(length, device=prompt.keys.device)[None].expand(prompt.key_valid.shape[0], -1)
        order = torch.where(prompt.key_valid, index, length).sort(dim=-1).values  # real tokens first, ascending
        return order.masked_fill(order == length, -1)[:, None, :].expand(-1, heads, -1)


class StaticFullCache(CompressedKVCache):
    """The full cache in static rows (the engine's layout): ``StaticFullCache(model, FullConfig())``. Every token
    is kept, in order; decoded tokens go to the next free slot of rows allocated for the longest request."""

    layer_class = EveryTokenLayer
    config_class = FullConfig
