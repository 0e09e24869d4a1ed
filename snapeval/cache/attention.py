"""The ``snapstream`` attention implementation: SDPA plus a hand-off from the compressed caches.

Hugging Face attention modules call ``past_key_values.update(...)`` and then the attention function registered
under ``config._attn_implementation``. A compressed cache needs two things the Cache API does not give it: the
queries (SnapKV scores the prompt with the last queries) and its own mask (slots hold tokens out of order, and empty
slots must be masked). So ``update`` leaves a :class:`PendingAttention` for its layer, and the attention function
below picks it up, right after, in the same layer:

- prefill: attention runs unchanged over the full prompt (HF's causal + padding mask), then ``after(query, mask,
  scaling)`` compresses that layer's cache once;
- decode: attention runs over the cache slots with the cache's own validity/visibility mask, through the decode
  kernel the cache was built with (:func:`snapeval.cache.kernels.decode_attention`): grouped-query heads read their KV head in place (no K/V copy).

With no pending hand-off (any other cache), the function is exactly Hugging Face's SDPA attention.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from snapeval.cache.kernels import RaggedRows, decode_attention, grouped_decode_attention, ragged_decode_attention
from snapeval.errors import SnapevalError

ATTN_IMPLEMENTATION = "snapstream"

#: model_type -> what it covers. SnapStream needs RoPE decoder-only attention with the HF functional interface.
SUPPORTED_ARCHITECTURES = {
    "llama": "Llama-3.1, SmolLM2, DeepSeek-R1-Distill-Llama",
    "qwen2": "Qwen2, DeepSeek-R1-Distill-Qwen",
}


@dataclass
class PendingAttention:
    """What a cache layer's ``update`` asks of the attention call that follows it."""

    layer_idx: int
    mask: torch.Tensor | None = None  # bool [B, 1, Q, K], True = attend; None = attend to every key
    after: Callable[[torch.Tensor, torch.Tensor | None, float], None] | None = None  # prefill compression
    replace_mask: bool = True  # False in prefill: keep Hugging Face's causal/padding mask
    kernel: str = "sdpa"  # the decode kernel of the cache that handed this off (snapeval.cache.kernels)
    #: rows of several caches decoded in one step (:class:`~snapeval.cache.segments.SegmentedCache`): each row
    #: attends over its own slots of one flat pool, through ``kernel``
    ragged: RaggedRows | None = None


_local = threading.local()


def hand_off(pending: PendingAttention) -> None:
    """Called by a cache layer's ``update``; consumed by :func:`snapstream_attention`."""
    stale = getattr(_local, "pending", None)
    if stale is not None:
        raise RuntimeError(
            f"a compressed KV cache was updated for layer {stale.layer_idx} but its attention never ran through the "
            f"'{ATTN_IMPLEMENTATION}' implementation; build the cache with the model (SnapStreamCache(model, ...)) "
            "so it can install it"
        )
    _local.pending = pending


def clear_hand_off() -> None:
    _local.pending = None


def snapstream_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """Attention with the signature of ``transformers``' attention interface.

    Shapes: ``query [B, Hq, Q, D]``, ``key``/``value`` ``[B, Hkv, K, D]``; returns ``([B, Q, Hq, D], None)``.
    """
    pending = getattr(_local, "pending", None)
    if pending is None or pending.layer_idx != getattr(module, "layer_idx", None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    _local.pending = None
    if pending.ragged is not None:  # every row over its own slots of the pool, in one call
        return ragged_decode_attention(query, pending.ragged, scaling, kernel=pending.kernel), None
    if pending.replace_mask and query.shape[2] == 1:
        kernel = pending.kernel
        if kernel != "sdpa":
            valid = None if pending.mask is None else pending.mask[:, 0, 0, :]
            return decode_attention(query, key, value, valid, scaling, kernel=kernel), None
        if pending.mask is not None and query.shape[1] != key.shape[1]:
            return grouped_decode_attention(query, key, value, pending.mask, scaling), None
    mask = pending.mask if pending.replace_mask else attention_mask
    if pending.replace_mask:
        is_causal = False
    out = sdpa_attention_forward(module, query, key, value, mask, dropout, scaling, is_causal, **kwargs)
    if pending.after is not None:
        pending.after(query, attention_mask, scaling if scaling is not None else query.shape[-1] ** -0.5)
    return out


AttentionInterface.register(ATTN_IMPLEMENTATION, snapstream_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_IMPLEMENTATION, sdpa_mask)


def check_architecture(model) -> None:
    """Raise a one-line :class:`SnapevalError` unless ``model`` is a supported decoder architecture."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in SUPPORTED_ARCHITECTURES:
        supported = "; ".join(f"{k} ({v})" for k, v in SUPPORTED_ARCHITECTURES.items())
        raise SnapevalError(f"model architecture {model_type!r} is not supported by the compressed caches; supported: {supported}")


def install(model) -> None:
    """Route the model's attention through :func:`snapstream_attention` (numerically SDPA otherwise)."""
    check_architecture(model)
    if model.config._attn_implementation != ATTN_IMPLEMENTATION:
        model.set_attn_implementation(ATTN_IMPLEMENTATION)
