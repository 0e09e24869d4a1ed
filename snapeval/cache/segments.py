"""Several configurations' static rows decoded in one step: one Hugging Face ``Cache`` over one pool per layer.

A shared group (:mod:`snapeval.branching`) decodes each compressed configuration of a chunk in its own engine, and
every step of every engine reads the model's weights and pays a step's launches for its own rows.
:class:`SegmentedCache` lays several configurations' rows (their own methods, budgets and slot counts) one after
another in one flat pool per layer, as the row segments of one batch: a decode step computes every row's
projections and MLP together (the weights read once), writes every row's new key and value with one indexed write
(each row's slot from its method's :meth:`~snapeval.cache.base.CompressedLayer.slot_rule`, held as per-row data), and
attends with one kernel call over every row's own slots (:class:`~snapeval.cache.kernels.RaggedRows`; the ``triton``
kernel in one launch, in place). So a step launches what one configuration's step launches, whatever the number of
configurations.

Each segment is a cache of its own method whose row tensors are views of the pool
(:meth:`~snapeval.cache.base.CompressedKVCache.adopt_rows`): rows are loaded, cleared and parked through that
cache's own methods, so a row holds what it holds in its configuration's own engine, and decodes the same tokens
(``tests/test_segments.py``, float32). Rows are addressed globally (row ``r`` of the batch);
:meth:`SegmentedCache.segment_of` maps a row to its segment and its row there.
"""
from __future__ import annotations

from typing import Sequence

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from snapeval.cache.attention import PendingAttention, hand_off
from snapeval.cache.base import ROW_TENSORS, CompressedKVCache, mark_static
from snapeval.cache.kernels import RaggedRows, resolve_decode_kernel
from snapeval.cache.methods import build_cache
from snapeval.cache.snapstream import ring_slot
from snapeval.errors import SnapevalError
from snapeval.run_args import DecodeChoices


class SegmentedLayer(CacheLayerMixin):
    """One decoder layer of a :class:`SegmentedCache`: the pool's tensors and each row's slot rule.

    Tensors: ``keys``/``values`` ``[N, D]`` and ``positions`` ``[N]`` (every segment's ``[R_s, Hkv, S_s(, D)]``
    rows one after another), ``next_position``/``fill`` ``[R]``; per row ``base`` (its first vector), ``slots``,
    and its rule (``appends``, ``sink``, ``recent``)."""

    is_compileable = False
    is_sliding = False

    def __init__(self, layer_idx: int, pool: dict[str, torch.Tensor], rule: dict[str, torch.Tensor],
                 num_kv_heads: int, most_slots: int, total_slots: int, kernel: str):
        super().__init__()
        self.layer_idx, self.kernel = layer_idx, kernel
        self.keys, self.values, self.positions = pool["keys"], pool["values"], pool["positions"]
        self.next_position, self.fill = pool["next_position"], pool["fill"]
        self.appends, self.sink, self.recent = rule["appends"], rule["sink"], rule["recent"]
        self.counts = rule["appends"].long()  # what a step adds to ``fill``: 1 for a row that appends
        heads = torch.arange(num_kv_heads, device=rule["base"].device)
        self.heads = rule["base"][:, None] + heads[None, :] * rule["slots"][:, None]  # [R, Hkv] each head's first
        self.last = rule["slots"] - 1
        self.ragged = RaggedRows(self.keys, self.values, self.positions, rule["base"], rule["slots"], num_kv_heads,
                                 most_slots, total_slots)
        self.is_initialized = True
        mark_static(self)

    def lazy_initialization(self, key_states, value_states) -> None:
        return None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, cache_kwargs=None):
        """``key_states``/``value_states`` ``[R, Hkv, 1, D]`` (every segment's rows, after RoPE): each row's token
        into its slot (a ring's, or its next free one), in one write; attention then reads every row's own slots."""
        if key_states.shape[2] != 1:
            raise SnapevalError(f"a segmented cache decodes one token per step; got {key_states.shape[2]}")
        position = self.next_position
        slot = torch.where(self.appends, torch.minimum(self.fill, self.last),
                           ring_slot(position, self.sink, self.recent))
        where = (self.heads + slot[:, None],)  # [R, Hkv] vector indices
        self.keys.index_put_(where, key_states[:, :, 0])
        self.values.index_put_(where, value_states[:, :, 0])
        self.positions.index_put_(where, position[:, None].expand(-1, key_states.shape[1]))
        self.fill.add_(self.counts)
        position.add_(1)
        hand_off(PendingAttention(self.layer_idx, ragged=self.ragged, kernel=self.kernel))
        return key_states, value_states

    def get_seq_length(self) -> int:
        return 0

    def get_mask_sizes(self, cache_position: torch.Tensor) -> tuple[int, int]:
        return cache_position.shape[0], 0

    def get_max_cache_shape(self) -> int:
        return -1


class SegmentedCache(Cache):
    """``SegmentedCache(model, configs, rows, slots, num_kv_heads, head_dim, dtype, devices)``: each
    configuration's ``rows`` rows of ``slots`` slots (static-row methods), consecutive segments of one decode batch
    in one pool per layer. Its row methods take a global row and act on that row of its segment's cache
    (:attr:`caches`, one per configuration, decoding in views of the pool, each built as the run's ``decoding``
    says: :func:`~snapeval.cache.methods.build_cache`)."""

    def __init__(self, model, configs: Sequence, rows: Sequence[int], slots: Sequence[int], num_kv_heads: int,
                 head_dim: int, dtype, devices: Sequence, *, decoding: DecodeChoices | None = None,
                 always_mask: bool = False):
        from snapeval.cache import method_info

        if not configs or not len(configs) == len(rows) == len(slots):
            raise ValueError(f"{len(configs)} configurations, {len(rows)} row counts and {len(slots)} slot counts; "
                             "allowed: one of each per configuration")
        self.caches: list[CompressedKVCache] = [
            build_cache(model, c, method_info(c).static_cache_class(), decoding=decoding) for c in configs]
        self.bounds: list[tuple[int, int]] = []
        start = 0
        for count in rows:
            self.bounds.append((start, start + count))
            start += count
        self.num_rows = start
        devices = self.caches[0].row_devices(devices)
        layers = []
        for index, device in enumerate(devices):
            rules = [cache.layers[index].slot_rule() for cache in self.caches]
            per_row = {"slots": [s for s, r in zip(slots, rows) for _ in range(r)],
                       "appends": [rule.appends for rule, r in zip(rules, rows) for _ in range(r)],
                       "sink": [rule.sink for rule, r in zip(rules, rows) for _ in range(r)],
                       "recent": [rule.recent for rule, r in zip(rules, rows) for _ in range(r)]}
            rule = {k: torch.tensor(v, dtype=torch.bool if k == "appends" else torch.long, device=device)
                    for k, v in per_row.items()}
            sizes = [r * num_kv_heads * s for r, s in zip(rows, slots)]  # each segment's vectors
            firsts = torch.tensor([0] + sizes[:-1], device=device).cumsum(0)
            rule["base"] = torch.cat([first + torch.arange(r, device=device) * num_kv_heads * s
                                      for first, r, s in zip(firsts, rows, slots)])
            pool = {"keys": torch.empty(sum(sizes), head_dim, dtype=dtype, device=device),
                    "values": torch.empty(sum(sizes), head_dim, dtype=dtype, device=device),
                    "positions": torch.empty(sum(sizes), dtype=torch.long, device=device),
                    "next_position": torch.empty(self.num_rows, dtype=torch.long, device=device),
                    "fill": torch.empty(self.num_rows, dtype=torch.long, device=device)}
            offset = 0
            for cache, (first, end), count, segment_slots, size in zip(self.caches, self.bounds, rows, slots, sizes):
                shape = (count, num_kv_heads, segment_slots)
                views = (pool["keys"][offset:offset + size].view(*shape, head_dim),
                         pool["values"][offset:offset + size].view(*shape, head_dim),
                         pool["positions"][offset:offset + size].view(*shape),
                         pool["next_position"][first:end], pool["fill"][first:end])
                cache.adopt_layer_rows(index, views, dtype, device, always_mask=always_mask)
                offset += size
            kernel = resolve_decode_kernel(self.caches[0].decode_kernel, device)  # the run's, as its segments'
            layers.append(SegmentedLayer(index, pool, rule, num_kv_heads, max(slots),
                                         sum(s * r for s, r in zip(slots, rows)), kernel))
        super().__init__(layers=layers)

    @property
    def is_compileable(self) -> bool:
        return False

    def segment_of(self, row: int) -> tuple[int, int]:
        """``(segment, its row)`` of global ``row``."""
        for index, (start, end) in enumerate(self.bounds):
            if start <= row < end:
                return index, row - start
        raise IndexError(f"row {row} is outside the {self.num_rows} rows")

    def next_positions(self) -> torch.Tensor:
        """``[R]`` each row's next position, segment after segment (the pool's own tensor)."""
        return self.layers[0].next_position

    def load_row(self, row: int, source: CompressedKVCache, source_row: int = 0) -> None:
        segment, local = self.segment_of(row)
        self.caches[segment].load_row(local, source, source_row)

    def load_row_layer(self, row: int, source: CompressedKVCache, index: int, source_row: int = 0) -> None:
        segment, local = self.segment_of(row)
        self.caches[segment].load_row_layer(local, source, index, source_row)

    def park_row(self, row: int) -> None:
        segment, local = self.segment_of(row)
        self.caches[segment].park_row(local)

    def row_kv_bytes(self, row: int) -> int:
        segment, local = self.segment_of(row)
        return self.caches[segment].row_kv_bytes(local)

    def row_tensors(self) -> list[torch.Tensor]:
        return [getattr(layer, name) for layer in self.layers for name in ROW_TENSORS]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(c.config) for c in self.caches)})"
