"""SnapKV importance scores (arXiv 2404.14469), shared by SnapStream and the SnapKV baseline.

Two steps, so that a shared prefill can compute the expensive one once for every budget (:mod:`snapeval.branching`):

1. :func:`window_attention`: the softmax of the last ``W`` prompt queries over the full causal key range, summed
   over those queries (per query head);
2. :func:`pooled_scores`: that sum restricted to the eviction candidates, pooled along the key axis inside the
   candidate range only, then averaged over the query heads of each KV group.

Pooling inside the candidate range is what the SnapKV reference code (``attn_weights[..., -W:, :-W].sum(-2)``, then
pooling), kvpress's ``SnapKVPress`` and the SnapStream paper's Eq. 3 (``K_evict`` excludes the sinks and the recent
window) do: the tokens just before the window must not average in the window's own (large) scores.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def window_attention(queries: torch.Tensor, keys: torch.Tensor, key_valid: torch.Tensor, *, scaling: float) -> torch.Tensor:
    """Attention the last prompt queries pay to every key, summed over those queries.

    Args:
        queries: ``[B, Hq, W, D]`` the last ``W`` queries of the (left-padded) prompt, after RoPE.
        keys: ``[B, Hkv, L, D]`` all prompt keys, after RoPE; ``Hq`` must be a multiple of ``Hkv`` (GQA).
        key_valid: ``[B, L]`` bool, False on padding. Query ``i`` of the window sits at index ``L - W + i``.
        scaling: softmax scale (``head_dim ** -0.5``).

    Returns:
        ``[B, Hkv, G, L]`` float32 (``G = Hq / Hkv``): softmax over the causal key range of each window query,
        summed over the window. Padding keys get 0; window queries that are padding contribute nothing.
    """
    batch, num_q_heads, window, head_dim = queries.shape
    num_kv_heads, length = keys.shape[1], keys.shape[2]
    groups = num_q_heads // num_kv_heads
    q = queries.float().reshape(batch, num_kv_heads, groups * window, head_dim)
    logits = torch.matmul(q, keys.float().transpose(-1, -2)) * scaling  # [B, Hkv, G*W, L]
    logits = logits.view(batch, num_kv_heads, groups, window, length)

    # Causality only matters inside the window's own W x W corner; padding only where a row is padded.
    corner = logits[..., length - window :]
    corner.masked_fill_(torch.ones(window, window, dtype=torch.bool, device=keys.device).triu(1), float("-inf"))
    if not bool(key_valid.all()):
        logits.masked_fill_(~key_valid[:, None, None, None, :], float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    query_valid = key_valid[:, length - window :]  # [B, W]
    if not bool(query_valid.all()):  # rows shorter than the window: their padded queries score nothing
        probs = probs.masked_fill(~query_valid[:, None, None, :, None], 0.0)
    return probs.sum(dim=3)


def pooled_scores(summed: torch.Tensor, candidate: torch.Tensor, *, pool_kernel: int, pooling: str) -> torch.Tensor:
    """Pool :func:`window_attention`'s sums inside each row's candidate range and average each KV group's heads.

    Args:
        summed: ``[B, Hkv, G, L]`` from :func:`window_attention`.
        candidate: ``[B, L]`` bool, True on the eviction candidates of each row: one contiguous range (for SnapKV
            the prompt before the observation window; for SnapStream the middle between the sinks and the ring).
        pool_kernel: odd pooling width along the key axis (stride 1, padding ``pool_kernel // 2``). At the edges of
            the candidate range the pool sees zeros (average pooling divides by ``pool_kernel``, as ``avg_pool1d``
            on the candidate slice does); scores are non-negative, so max pooling ignores them.
        pooling: ``"avg"`` or ``"max"``.

    Returns:
        ``[B, Hkv, L]`` float32 scores; only candidate positions are meaningful.
    """
    batch, num_kv_heads, groups, length = summed.shape
    inside = summed.masked_fill(~candidate[:, None, None, :], 0.0).reshape(batch * num_kv_heads * groups, 1, length)
    if pooling == "avg":
        pooled = F.avg_pool1d(inside, kernel_size=pool_kernel, stride=1, padding=pool_kernel // 2)
    elif pooling == "max":
        pooled = F.max_pool1d(inside, kernel_size=pool_kernel, stride=1, padding=pool_kernel // 2)
    else:
        raise ValueError(f"pooling={pooling!r} is invalid; allowed: avg, max")
    return pooled.view(batch, num_kv_heads, groups, length).mean(dim=2)


def snapkv_scores(queries, keys, key_valid, candidate, *, scaling: float, pool_kernel: int,
                  pooling: str) -> torch.Tensor:
    """:func:`window_attention` then :func:`pooled_scores`: ``[B, Hkv, L]`` scores of the candidates."""
    summed = window_attention(queries, keys, key_valid, scaling=scaling)
    return pooled_scores(summed, candidate, pool_kernel=pool_kernel, pooling=pooling)


def observation_scores(prompt, candidate: torch.Tensor, observation: int, *, pool_kernel: int,
                       pooling: str) -> torch.Tensor:
    """SnapKV's scores of a prefilled ``prompt`` (a :class:`~snapeval.cache.base.LayerPrompt`): its last
    ``observation`` queries' attention (computed once per window size and shared, ``prompt.window_attention``), then
    :func:`pooled_scores` over ``candidate`` ``[B, L]``. ``[B, Hkv, L]``."""
    return pooled_scores(prompt.window_attention(observation), candidate, pool_kernel=pool_kernel, pooling=pooling)
