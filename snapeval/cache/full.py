"""The uncompressed baseline: Hugging Face's own ``DynamicCache``, with the same introspection as the others."""
from __future__ import annotations

import torch
from transformers import DynamicCache

from snapeval.cache.base import CompressedKVCache, mark_static
from snapeval.cache.config import FullConfig
from snapeval.cache.snapkv import SnapKVLayer
from snapeval.errors import check_int


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
    """Keeps every prompt token (in order) and appends decoded tokens: the full cache in the compressed-cache layout.

    ``reserve`` > 0 (:class:`StaticFullCache` built for :func:`snapeval.generate`): the rows built at the end of
    prefill get ``reserve`` empty slots after the prompt and become static, so decoded tokens are written by index
    into the next free slot (:meth:`SnapKVLayer.write`) instead of concatenated to a new copy of the layer every step.
    """

    reserve = 0

    def select(self, prompt):
        length = prompt.keys.shape[2]
        heads = prompt.keys.shape[1]
        index = torch.arange(length, device=prompt.keys.device)[None].expand(prompt.key_valid.shape[0], -1)
        order = torch.where(prompt.key_valid, index, length).sort(dim=-1).values  # real tokens first, ascending
        return order.masked_fill(order == length, -1)[:, None, :].expand(-1, heads, -1)

    def build(self, prompt) -> None:
        super().build(prompt)
        if not self.reserve:
            return
        batch, heads, kept, dim = self.keys.shape
        slots = kept + self.reserve
        for name, empty in (("keys", 0), ("values", 0), ("positions", -1)):
            held = getattr(self, name)
            rows = held.new_full((batch, heads, slots, *held.shape[3:]), empty)
            rows[:, :, :kept].copy_(held)
            setattr(self, name, rows)
        self.static = True
        mark_static(self)


class StaticFullCache(CompressedKVCache):
    """The full cache in static rows (the engine's layout): ``StaticFullCache(model, FullConfig())``. Every token
    is kept, in order (a left-padded row's real tokens first); decoded tokens go to the next free slot of rows
    allocated for the longest request (:meth:`allocate_rows`, the engine), or, with ``reserve=N``, of rows built at
    the end of prefill with ``N`` free slots after the prompt (:func:`snapeval.generate`: no per-step concatenation,
    and a compiled decode step of fixed shapes)."""

    layer_class = EveryTokenLayer
    config_class = FullConfig

    def __init__(self, model, config=None, *, reserve: int = 0, decode_kernel: str = "auto"):
        super().__init__(model, FullConfig() if config is None else config, decode_kernel=decode_kernel)
        check_int("reserve", reserve, 0, error=ValueError)
        for layer in self.layers:
            layer.reserve = reserve
        self.reserve = reserve

    def kv_bytes_per_row(self) -> int:
        """The longest row's filled slots (with ``reserve``: what a ``DynamicCache`` of the padded batch holds after
        the same steps, so that reported sizes do not depend on the layout); the whole row otherwise."""
        if not self.reserve or self.layers[0].positions is None:
            return super().kv_bytes_per_row()
        return max(self.row_kv_bytes(row) for row in range(self.layers[0].keys.shape[0]))
