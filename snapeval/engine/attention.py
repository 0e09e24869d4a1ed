"""The engine's attention implementation: ``snapstream`` plus grouped-query decode without copying K/V.

In a masked decode step (one query per row, a validity mask from the cache) Hugging Face's SDPA path repeats every
KV head ``Hq / Hkv`` times (``repeat_kv``) because SDPA's own GQA support needs ``attn_mask=None``: with 8 slots
of budget 1024 that copies ``2 x [8, Hq, 1024, D]`` per layer and step, which dominates a small model's decode on
CPU. With a single query per row the query heads of a group can instead be laid out as that group's queries:
``[B, Hq, 1, D] -> [B, Hkv, G, D]`` attends to ``[B, Hkv, S, D]`` with the ``[B, 1, 1, S]`` mask broadcast, the same
arithmetic per query head, no copy. Everything else is delegated to :func:`snapeval.cache.attention.snapstream_attention`.
"""
from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from snapeval.cache import attention

ENGINE_ATTN_IMPLEMENTATION = "snapstream_engine"


def engine_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """``snapstream`` attention; masked single-query decode folds the query heads of each KV group (no K/V copy).

    Shapes: ``query [B, Hq, Q, D]``, ``key``/``value`` ``[B, Hkv, K, D]``; returns ``([B, Q, Hq, D], None)``.
    """
    pending = getattr(attention._local, "pending", None)
    batch, num_heads, num_queries, head_dim = query.shape
    num_kv = key.shape[1]
    if (pending is None or pending.layer_idx != getattr(module, "layer_idx", None) or pending.after is not None
            or pending.mask is None or num_queries != 1 or num_heads == num_kv):
        return attention.snapstream_attention(module, query, key, value, attention_mask, dropout, scaling,
                                              is_causal, **kwargs)
    attention.clear_hand_off()
    grouped = query.reshape(batch, num_kv, num_heads // num_kv, head_dim)  # [B, Hkv, G, D]: a group's heads as queries
    out = torch.nn.functional.scaled_dot_product_attention(grouped, key, value, attn_mask=pending.mask, scale=scaling)
    return out.reshape(batch, 1, num_heads, head_dim), None  # [B, Hkv, G, D] is [B, Hq, 1, D] is [B, 1, Hq, D]


AttentionInterface.register(ENGINE_ATTN_IMPLEMENTATION, engine_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(ENGINE_ATTN_IMPLEMENTATION, sdpa_mask)
