"""Mechanics shared by the compressed caches: prefill hand-off, per-row lengths, masks, write-by-index.

A compressed layer goes through two phases:

1. **prefill** (first ``update``): the full prompt keys are returned unchanged, attention runs normally, and then
   :meth:`CompressedLayer.compress` builds the compressed cache from the queries (see ``attention.py``);
2. **decode** (every later ``update``): new tokens are written into the cache by index and attention sees only the
   slots the method says are visible.

Rows of a batch are left-padded prompts of different lengths; every row compresses its own tokens. A slot's
*position* is the original 0-based position of the token it holds in its row (-1: empty); keys are stored after
RoPE, so positions never change.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from snapeval.cache import attention
from snapeval.cache.attention import PendingAttention, hand_off
from snapeval.cache.kernels import check_decode_kernel, resolve_decode_kernel


def key_validity(hf_mask: torch.Tensor | None, batch: int, length: int, device) -> torch.Tensor:
    """``[B, L]`` bool: which prompt keys are real tokens, read from the mask of the last prompt query.

    Hugging Face passes ``None`` when nothing is padded; a bool mask (True = attend) or an additive float mask
    otherwise. Only left padding is supported: the last prompt token of every row must be real.
    """
    if hf_mask is None:
        return torch.ones(batch, length, dtype=torch.bool, device=device)
    last = hf_mask[:, 0, -1, :length]
    valid = last if last.dtype == torch.bool else last > torch.finfo(last.dtype).min / 2
    valid = valid.expand(batch, length)
    if not bool(valid[:, -1].all()):
        raise ValueError("compressed KV caches need left padding: the last prompt token of every row must be real")
    return valid


@dataclass
class LayerPrompt:
    """One layer's prefilled prompt, as compression sees it (built by the attention hand-off or by a shared prefill).

    Attributes:
        keys, values: ``[B, Hkv, L, D]`` every prompt key and value, after RoPE (left-padded rows).
        queries: ``[B, Hq, W, D]`` the last ``W`` prompt queries (at least every observation window that is asked for).
        key_valid: ``[B, L]`` bool, False on padding.
        scaling: the attention softmax scale.
    """

    keys: torch.Tensor
    values: torch.Tensor
    queries: torch.Tensor
    key_valid: torch.Tensor
    scaling: float
    _window_sums: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)

    @property
    def lengths(self) -> torch.Tensor:
        """``[B]`` real tokens per row."""
        return self.key_valid.sum(dim=-1)

    @property
    def padding(self) -> torch.Tensor:
        """``[B]`` left padding per row."""
        return self.key_valid.shape[-1] - self.lengths

    def positions(self) -> torch.Tensor:
        """``[B, L]`` original position of every padded-prompt index (negative on padding)."""
        length = self.key_valid.shape[-1]
        return torch.arange(length, device=self.keys.device)[None] - self.padding[:, None]

    def window_attention(self, window: int) -> torch.Tensor:
        """``[B, Hkv, G, L]`` :func:`~snapeval.cache.scoring.window_attention` of the last ``window`` queries,
        computed once per window size and shared by every method and budget that asks for it."""
        from snapeval.cache.scoring import window_attention

        window = min(window, self.keys.shape[2])
        if window > self.queries.shape[2]:
            raise ValueError(f"observation window {window} exceeds the {self.queries.shape[2]} queries kept")
        if window not in self._window_sums:
            self._window_sums[window] = window_attention(
                self.queries[:, :, -window:], self.keys, self.key_valid, scaling=self.scaling)
        return self._window_sums[window]


class SlotRule(NamedTuple):
    """Where a static row's decoded token goes (:meth:`CompressedLayer.slot_rule`): ``appends``: the row's next free
    slot (its ``fill``, the last slot once full), ``fill`` then counting it; otherwise slot ``position`` below ``sink``,
    else ring slot ``sink + (position + 1 - sink) mod recent`` (:func:`snapeval.cache.snapstream.ring_slot`)."""

    appends: bool
    sink: int = 0
    recent: int = 1


#: The tensors of a layer's rows that a decode step writes in place (:meth:`CompressedLayer.update`).
ROW_TENSORS = ("keys", "values", "positions", "next_position", "fill")


def mark_static(layer) -> None:
    """Mark ``layer``'s row tensors as static addresses (``torch._dynamo.mark_static_address``): a compiled decode
    step that writes into them in place is then still captured by CUDA graphs (inductor skips graphs whose step
    mutates any other input: "skipping cudagraphs due to mutated inputs"). Rows must never be rebound afterwards."""
    for name in ROW_TENSORS:
        tensor = getattr(layer, name)
        if tensor is not None:
            torch._dynamo.mark_static_address(tensor)


class CompressedLayer(CacheLayerMixin):
    """One layer's compressed cache. Subclasses choose what to keep (:meth:`select`) and where new tokens go.

    Tensors after prefill: ``keys``/``values`` ``[B, Hkv, S, D]``, ``positions`` ``[B, Hkv, S]`` (int64, -1 empty),
    ``next_position`` ``[B]`` (position of the next token of each row).
    """

    is_compileable = False
    is_sliding = False
    #: Decoded tokens go to new slots (SnapKV, every token): a row holds only its filled slots' worth of KV.
    appends = False

    def __init__(self, layer_idx: int, config):
        super().__init__()
        self.layer_idx = layer_idx
        self.config = config
        self.positions: torch.Tensor | None = None
        self.next_position: torch.Tensor | None = None
        self.fill: torch.Tensor | None = None  # [B] slots in use, for layers that append (SnapKV, every token)
        self.seen = 0  # padded tokens processed: what generate() expects from get_seq_length()
        self.compress_seconds = 0.0
        #: Static rows (:meth:`CompressedKVCache.allocate_rows`): the token count stays constant (a compiled step
        #: never retraces) and, with ``always_mask``, decode always hands attention the validity mask (no
        #: data-dependent branch: the same computation every step).
        self.static = False
        self.always_mask = False
        #: The run's ``decode_kernel`` (``auto`` or a kernel name, :mod:`snapeval.run_args`), set by the cache, and
        #: the kernel it resolves to on this layer's device (:func:`~snapeval.cache.kernels.resolve_decode_kernel`,
        #: once, when the layer's device is known): every decode step hands it to attention.
        self.kernel_choice = "auto"
        self.kernel = "sdpa"
        self._prompt: tuple[torch.Tensor, torch.Tensor] | None = None

    # --- hooks for subclasses -------------------------------------------------------------------------------
    def select(self, prompt: LayerPrompt) -> torch.Tensor:
        """Return ``[B, Hkv, S]`` padded-prompt indices to keep per slot, -1 for an empty slot."""
        raise NotImplementedError

    def write(self, key, value, position) -> None:
        """Store one new token per row: ``key``/``value`` ``[B, Hkv, 1, D]``, ``position`` ``[B]``."""
        raise NotImplementedError

    def write_slot(self, slot, key, value, position) -> None:
        """Write one new token per row into slot ``slot`` ``[B]`` of every KV head of the static rows: ``key``/
        ``value`` ``[B, Hkv, 1, D]``, ``position`` ``[B]``. By ``index_put_``, which a compiled decode step updates in
        place; inductor compiled the former ``scatter_`` into a copy of the whole rows, per layer and step (its
        generated code allocates a buffer the size of ``keys``: ``tests/test_gpu_decode.py``)."""
        rows = torch.arange(key.shape[0], device=key.device)[:, None]  # [B, 1]
        heads = torch.arange(key.shape[1], device=key.device)[None, :]  # [1, Hkv]
        where = (rows, heads, slot[:, None])  # broadcast to [B, Hkv]
        self.keys.index_put_(where, key[:, :, 0])
        self.values.index_put_(where, value[:, :, 0])
        self.positions.index_put_(where, position[:, None].expand(-1, key.shape[1]))

    def slot_rule(self) -> SlotRule:
        """Where :meth:`write` puts a decoded token, as data: one write can then serve the rows of several
        configurations (:class:`~snapeval.cache.segments.SegmentedCache`; ``tests/test_segments.py`` checks that it
        writes what :meth:`write` writes, for every method with static rows)."""
        raise NotImplementedError(f"{type(self).__name__} does not state its slot rule")

    def slot_visible(self, query_positions: torch.Tensor) -> torch.Tensor:
        """``[B, T, S]``: may a new query at ``query_positions [B, T]`` see each cached slot?"""
        return (self.positions[:, 0] >= 0)[:, None, :].expand(-1, query_positions.shape[1], -1)

    def new_token_visible(self, query_positions: torch.Tensor) -> torch.Tensor:
        """``[B, T, T]``: may new query ``i`` see new key ``j`` (beyond causality, which is applied anyway)?"""
        t = query_positions.shape[1]
        return torch.ones(query_positions.shape[0], t, t, dtype=torch.bool, device=query_positions.device)

    # --- Hugging Face layer API ---------------------------------------------------------------------------
    def lazy_initialization(self, key_states, value_states) -> None:  # buffers are built by compress()
        self.dtype, self.device = key_states.dtype, key_states.device
        self.kernel = resolve_decode_kernel(self.kernel_choice, self.device)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, cache_kwargs=None):
        """``key_states``/``value_states`` ``[B, Hkv, T, D]`` (after RoPE); returns the keys/values to attend to."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        num_new = key_states.shape[2]
        if not self.static:
            self.seen += num_new
        if self.positions is None:  # prefill: attend normally, compress right after
            self._prompt = (key_states, value_states)
            hand_off(PendingAttention(self.layer_idx, after=self.compress, replace_mask=False))
            return key_states, value_states
        if num_new == 1:  # decode: write in place, attend to the valid slots
            self.write(key_states, value_states, self.next_position)
            self.next_position.add_(1)  # in place: a static row tensor (CUDA graphs replay it), never rebound
            valid = self.positions[:, :1, None, :] >= 0  # [B, 1, 1, S]; validity is the same for every head
            # sdpa drops an all-true mask (its unmasked GQA path; the check reads the device); the other decode
            # kernels mask at no cost, so they always get it (no host sync per layer)
            always = self.always_mask or self.kernel != "sdpa"
            hand_off(PendingAttention(self.layer_idx, mask=valid if always or not bool(valid.all()) else None,
                                      kernel=self.kernel))
            return self.keys, self.values
        return self._append_chunk(key_states, value_states)

    def _append_chunk(self, key_states, value_states):
        """Several tokens at once (scoring a continuation): attend as if they had been decoded one by one."""
        num_new = key_states.shape[2]
        device = key_states.device
        query_positions = self.next_position[:, None] + torch.arange(num_new, device=device)  # [B, T]
        causal = torch.ones(num_new, num_new, dtype=torch.bool, device=device).tril()
        mask = torch.cat(
            [self.slot_visible(query_positions), self.new_token_visible(query_positions) & causal], dim=-1
        )[:, None]  # [B, 1, T, S + T]
        keys = torch.cat([self.keys, key_states], dim=2)
        values = torch.cat([self.values, value_states], dim=2)
        for j in range(num_new):
            self.write(key_states[:, :, j : j + 1], value_states[:, :, j : j + 1], query_positions[:, j])
        self.next_position += num_new
        hand_off(PendingAttention(self.layer_idx, mask=mask))
        return keys, values

    def compress(self, query: torch.Tensor, hf_mask: torch.Tensor | None, scaling: float) -> None:
        """End of prefill (the attention hand-off): build the compressed cache. ``query`` ``[B, Hq, L, D]``."""
        keys, values = self._prompt
        self._prompt = None
        key_valid = key_validity(hf_mask, keys.shape[0], keys.shape[2], keys.device)
        self.build(LayerPrompt(keys, values, query, key_valid, scaling))

    def build(self, prompt: LayerPrompt) -> None:
        """Build this layer's compressed cache from a prefilled prompt (the only way a prompt enters the cache)."""
        start = time.perf_counter()
        keys, values = prompt.keys, prompt.values
        if not self.is_initialized:
            self.lazy_initialization(keys, values)
        self.seen = keys.shape[2]
        head_dim = keys.shape[-1]
        index = self.select(prompt)  # [B, H, S]
        empty = index < 0
        gather = index.clamp(min=0)[..., None].expand(-1, -1, -1, head_dim)
        self.keys = keys.gather(2, gather).masked_fill(empty[..., None], 0)
        self.values = values.gather(2, gather).masked_fill(empty[..., None], 0)
        self.positions = (index - prompt.padding[:, None, None]).masked_fill(empty, -1)
        self.next_position = prompt.lengths.clone()
        self.fill = (~empty[:, 0]).sum(dim=-1)
        self.compress_seconds += time.perf_counter() - start

    def get_seq_length(self) -> int:
        return self.seen

    def get_mask_sizes(self, cache_position: torch.Tensor) -> tuple[int, int]:
        # Hugging Face builds its usual mask over every token seen; it is used in prefill and replaced in decode.
        return self.seen + cache_position.shape[0], 0

    def get_max_cache_shape(self) -> int:
        return -1

    def reset(self) -> None:
        self.keys = self.values = self.positions = self.next_position = self.fill = None
        self.seen = 0
        self.is_initialized = False

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.batch_select_indices(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        for name in ROW_TENSORS:
            tensor = getattr(self, name)
            if tensor is not None:
                setattr(self, name, tensor[indices.to(tensor.device)])


class CompressedKVCache(Cache):
    """A Hugging Face ``Cache`` of :class:`CompressedLayer` s, one per decoder layer.

    Build it with the model (``Cache(model, config)``): it checks the architecture and installs the ``snapstream``
    attention implementation, then works with ``model(...)`` and ``model.generate(..., past_key_values=cache)``.
    """

    layer_class: type[CompressedLayer] = CompressedLayer
    config_class: type = object  # subclasses name the config dataclass they take

    def __init__(self, model, config, *, decode_kernel: str = "auto"):
        if not isinstance(config, self.config_class):
            raise TypeError(f"config must be a {self.config_class.__name__}, got {type(config).__name__}")
        check_decode_kernel(decode_kernel)
        attention.install(model)
        self.config = config
        #: The run's decode kernel (``auto`` or a name of :data:`~snapeval.cache.kernels.DECODE_KERNELS`): each layer
        #: resolves it for its own device and hands it to attention with every decode step.
        self.decode_kernel = decode_kernel
        layers = [self.layer_class(i, config) for i in range(model.config.num_hidden_layers)]
        for layer in layers:
            layer.kernel_choice = decode_kernel
        super().__init__(layers=layers)

    @property
    def is_compileable(self) -> bool:
        return False

    def crop(self, max_length: int):
        raise NotImplementedError("compressed KV caches cannot be cropped (assisted decoding is not supported)")

    def kv_bytes(self) -> int:
        """Bytes held by keys and values over all layers (0 before prefill)."""
        return sum(l.keys.nbytes + l.values.nbytes for l in self.layers if l.positions is not None)

    def kv_bytes_per_row(self) -> int:
        batch = self.layers[0].keys.shape[0] if self.layers[0].positions is not None else 1
        return self.kv_bytes() // batch

    def row_kv_bytes(self, row: int) -> int:
        """KV bytes held by one row over all layers: every slot of a fixed-size layout; for an appending cache (rows
        allocated for the longest request) only the slots it filled."""
        layer = self.layers[0]
        per_slot = sum(l.keys[row, :, :1].nbytes + l.values[row, :, :1].nbytes for l in self.layers)
        slots = int(layer.fill[row]) if layer.appends else layer.positions.shape[-1]
        return slots * per_slot

    def slot_positions(self, layer_idx: int) -> torch.Tensor:
        """``[B, Hkv, S]`` original token position held by every slot of every KV head (-1: empty slot)."""
        return self.layers[layer_idx].positions.clone()

    def load_prompt(self, prompts: "list[LayerPrompt]") -> None:
        """Compress a prompt prefilled elsewhere (one :class:`LayerPrompt` per layer, from a
        :class:`~snapeval.cache.capture.PromptCapture`): the same cache as prefilling through this cache."""
        if len(prompts) != len(self.layers):
            raise ValueError(f"{len(prompts)} layer prompts for a cache of {len(self.layers)} layers")
        for index, prompt in enumerate(prompts):
            self.load_layer(index, prompt)

    def load_layer(self, index: int, prompt: "LayerPrompt") -> None:
        """Compress one layer of a prompt prefilled elsewhere (:meth:`load_prompt`, one layer at a time: a shared
        prefill frees each captured layer once every branch holds it)."""
        self.layers[index].build(prompt)

    def compact_layer(self, index: int) -> None:
        """Drop layer ``index``'s trailing slots that no row and no head fills (a prompt shorter than the budget
        fills a prefix of the layout: sinks, ring and top-k in that order), keeping a copy of the filled prefix only.
        For a branch held until :meth:`load_row` copies it into an engine row, which empties the slots past it: the
        row is the same, and the branch holds the prompt's tokens instead of the whole budget. Not for a cache that
        decodes itself (its writes address the whole layout)."""
        layer = self.layers[index]
        filled = (layer.positions >= 0).flatten(0, 1).any(0).nonzero()
        used = int(filled[-1]) + 1 if len(filled) else 1
        if used < layer.positions.shape[-1]:
            for name in ("keys", "values", "positions"):
                setattr(layer, name, getattr(layer, name)[:, :, :used].clone())

    def move_layer(self, index: int, device) -> None:
        """Move layer ``index``'s tensors to ``device`` (a held branch waiting in host memory, ``"cpu"``, until
        :meth:`load_row` copies it into an engine row on the model's device: the row is the same)."""
        layer = self.layers[index]
        for name in ROW_TENSORS:
            tensor = getattr(layer, name)
            if tensor is not None:
                setattr(layer, name, tensor.to(device))

    @property
    def compress_seconds(self) -> float:
        """Wall time spent in compression at the end of prefill, summed over layers."""
        return sum(l.compress_seconds for l in self.layers)

    # --- fixed rows (continuous batching): allocate once, load a freshly compressed row, clear a row ---------------
    def allocate_rows(self, num_rows: int, num_kv_heads: int, head_dim: int, dtype, device, *,
                      always_mask: bool = False, slots: int | None = None) -> None:
        """Allocate the decode state of ``num_rows`` empty rows once: ``keys``/``values`` ``[R, Hkv, S, D]`` zeros,
        ``positions`` ``[R, Hkv, S]`` -1, ``next_position`` ``[R]`` 0. ``S`` = ``slots``, by default the config's
        budget (a cache that appends while decoding needs its kept prompt plus the tokens it will decode). Later
        calls to :meth:`load_row`, :meth:`clear_row` and :meth:`park_row` only write into these tensors, and decode
        steps (``update``) only write by index. ``always_mask``: every decode step gets the validity mask, even
        when every slot is valid (one graph for ``torch.compile``). ``device``: one device, or one per layer (a
        model split over devices keeps each layer's rows on that layer's device,
        :func:`snapeval.models.devices.layer_devices`)."""
        slots = self.config.budget if slots is None else slots
        devices = self.row_devices(device)
        self.adopt_rows([(torch.empty(num_rows, num_kv_heads, slots, head_dim, dtype=dtype, device=device),
                          torch.empty(num_rows, num_kv_heads, slots, head_dim, dtype=dtype, device=device),
                          torch.empty(num_rows, num_kv_heads, slots, dtype=torch.long, device=device),
                          torch.empty(num_rows, dtype=torch.long, device=device),
                          torch.empty(num_rows, dtype=torch.long, device=device)) for device in devices],
                        dtype, devices, always_mask=always_mask)

    def row_devices(self, device) -> list:
        """One device per layer: ``device`` for every layer, or a list of one per layer."""
        devices = list(device) if isinstance(device, (list, tuple)) else [device] * len(self.layers)
        if len(devices) != len(self.layers):
            raise ValueError(f"{len(devices)} devices for a cache of {len(self.layers)} layers")
        return devices

    def adopt_rows(self, tensors, dtype, devices, *, always_mask: bool = False) -> None:
        """Decode in ``tensors``, per layer ``(keys, values, positions, next_position, fill)`` shaped as
        :meth:`allocate_rows` allocates them (its own, or views of a pool several caches decode in,
        :class:`~snapeval.cache.segments.SegmentedCache`), emptied here; their storage never changes afterwards."""
        for index, (rows, device) in enumerate(zip(tensors, devices, strict=True)):
            self.adopt_layer_rows(index, rows, dtype, device, always_mask=always_mask)

    def adopt_layer_rows(self, index: int, rows, dtype, device, *, always_mask: bool = False) -> None:
        """:meth:`adopt_rows` for layer ``index`` alone."""
        layer = self.layers[index]
        layer.dtype, layer.device, layer.is_initialized = dtype, device, True
        layer.kernel = resolve_decode_kernel(layer.kernel_choice, device)
        layer.static, layer.always_mask, layer.seen = True, always_mask, 0
        layer.keys, layer.values, layer.positions, layer.next_position, layer.fill = rows
        for tensor in (layer.keys, layer.values, layer.next_position, layer.fill):
            tensor.zero_()
        layer.positions.fill_(-1)
        mark_static(layer)

    def row_tensors(self) -> list[torch.Tensor]:
        """Every tensor the rows live in (introspection: after :meth:`allocate_rows` their storage never changes)."""
        return [getattr(l, n) for l in self.layers for n in ROW_TENSORS]

    def next_positions(self) -> torch.Tensor:
        """``[R]`` the position of each row's next token (the same in every layer)."""
        return self.layers[0].next_position

    def load_row(self, row: int, source: "CompressedKVCache", source_row: int = 0) -> None:
        """Copy row ``source_row`` of a compressed ``source`` cache (same method, after prefill) into ``row``. A
        source with fewer slots (an appending cache's kept prompt) fills the first slots; the rest are emptied."""
        for index in range(len(self.layers)):
            self.load_row_layer(row, source, index, source_row)

    def load_row_layer(self, row: int, source: "CompressedKVCache", index: int, source_row: int = 0) -> None:
        """:meth:`load_row` of layer ``index`` only (a branch can then free that layer before the next is built)."""
        layer, src = self.layers[index], source.layers[index]
        used = src.positions.shape[-1]
        if used > layer.positions.shape[-1]:
            raise ValueError(f"a row of {used} slots does not fit in {layer.positions.shape[-1]} slots")
        for name, empty in (("keys", 0), ("values", 0), ("positions", -1)):
            getattr(layer, name)[row, :, :used].copy_(getattr(src, name)[source_row])
            getattr(layer, name)[row, :, used:] = empty
        layer.next_position[row : row + 1].copy_(src.next_position[source_row : source_row + 1])
        layer.fill[row : row + 1].copy_(src.fill[source_row : source_row + 1])

    def clear_row(self, row: int) -> None:
        """Empty ``row``: zero keys/values, every position -1, next position 0."""
        for layer in self.layers:
            layer.keys[row].zero_()
            layer.values[row].zero_()
            layer.positions[row].fill_(-1)
            layer.next_position[row] = 0
            layer.fill[row] = 0

    def park_row(self, row: int) -> None:
        """Idle ``row``: zero keys and values, every slot visible (position 0). Its ignored output attends to zeros
        (never over an empty set, so no NaN) and needs no mask (an idle row does not force masking on the others)."""
        self.clear_row(row)
        for layer in self.layers:
            layer.positions[row].zero_()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r}, layers={len(self.layers)}, decode_kernel={self.decode_kernel!r})"
