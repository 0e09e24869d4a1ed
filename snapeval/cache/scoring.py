"""SnapKV importance scores (arXiv 2404.14469), shared by SnapStream and the SnapKV baseline."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def snapkv_scores(
    queries: torch.Tensor,
    keys: torch.Tensor,
    key_valid: torch.Tensor,
    *,
    scaling: float,
    kernel: int,
    pooling: str,
) -> torch.Tensor:
    """Score every key by the attention the last prompt queries pay to it.

    Args:
        queries: ``[B, Hq, W, D]`` the last ``W`` queries of the (left-padded) prompt, after RoPE.
        keys: ``[B, Hkv, L, D]`` all prompt keys, after RoPE; ``Hq`` must be a multiple of ``Hkv`` (GQA).
        key_valid: ``[B, L]`` bool, False on padding. Query ``i`` of the window sits at index ``L - W + i``.
        scaling: softmax scale (``head_dim ** -0.5``).
        kernel: odd pooling kernel along the key axis (stride 1, padding ``kernel // 2``).
        pooling: ``"avg"`` or ``"max"``.

    Returns:
        ``[B, Hkv, L]`` float32 scores: softmax over the full causal key range for each window query, summed over
        the window queries, pooled along the key axis, then averaged over the query heads of each KV group.
        Padding keys score 0; window queries that are padding contribute nothing.
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
    summed = probs.sum(dim=3).reshape(batch * num_kv_heads * groups, 1, length)  # [B*Hkv*G, 1, L]

    if pooling == "avg":
        pooled = F.avg_pool1d(summed, kernel_size=kernel, stride=1, padding=kernel // 2)
    elif pooling == "max":
        pooled = F.max_pool1d(summed, kernel_size=kernel, stride=1, padding=kernel // 2)
    else:
        raise ValueError(f"pooling={pooling!r} is invalid; allowed: avg, max")
    return pooled.view(batch, num_kv_heads, groups, length).mean(dim=2)
