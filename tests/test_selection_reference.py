"""SnapKV selection against a deliberately simple reference: plain loops over layers, heads and positions."""
import math

import pytest
import torch

from snapeval import SnapStreamConfig
from snapeval.cache.base import LayerPrompt
from snapeval.cache.snapkv import SnapKVConfig, SnapKVLayer
from snapeval.cache.snapstream import SnapStreamLayer


def reference_scores(q, k, obs, kernel, pooling, lo, hi):
    """q: [Hq, L, D], k: [Hkv, L, D] for ONE unpadded row -> list[Hkv][L] scores, pooled inside the candidate range
    [lo, hi) only (SnapKV's reference code pools ``attn[..., -W:, :-W]``): outside it the pool sees nothing."""
    hq, length, dim = q.shape
    hkv = k.shape[0]
    group = hq // hkv
    scale = 1 / math.sqrt(dim)
    window = min(obs, length)
    per_q_head = []
    for h in range(hq):
        summed = [0.0] * length
        for i in range(length - window, length):
            logits = [float(q[h, i] @ k[h // group, j]) * scale for j in range(i + 1)]
            top = max(logits)
            exps = [math.exp(x - top) for x in logits]
            total = sum(exps)
            for j in range(i + 1):
                summed[j] += exps[j] / total
        pooled = []
        for j in range(length):
            neigh = [summed[j + d] if lo <= j + d < hi else None for d in range(-(kernel // 2), kernel // 2 + 1)]
            if not any(x is not None for x in neigh):
                pooled.append(0.0)
                continue
            if pooling == "avg":
                pooled.append(sum(x for x in neigh if x is not None) / kernel)
            else:
                pooled.append(max(x for x in neigh if x is not None))
        per_q_head.append(pooled)
    return [[sum(per_q_head[g * group + m][j] for m in range(group)) / group for j in range(length)] for g in range(hkv)]


def reference_snapstream(q, k, cfg):
    """Positions kept per KV head: sinks, last `recent`, top-k middle (as a set)."""
    length = k.shape[1]
    keep = []
    scores = reference_scores(q, k, cfg.observation, cfg.pool_kernel, cfg.pooling, cfg.sink, length - cfg.recent)
    for h in range(k.shape[0]):
        sinks = set(range(min(cfg.sink, length)))
        recent = set(range(max(cfg.sink, length - cfg.recent), length))
        middle = sorted(range(cfg.sink, max(cfg.sink, length - cfg.recent)), key=lambda j: -scores[h][j])
        keep.append(sinks | recent | set(middle[: cfg.topk]))
    return keep


@pytest.mark.parametrize("pooling", ["avg", "max"])
@pytest.mark.parametrize("hq, hkv", [(4, 4), (6, 2), (4, 1)])
def test_snapstream_selection_matches_loops(pooling, hq, hkv):
    torch.manual_seed(hq * 10 + hkv)
    cfg = SnapStreamConfig(sink=2, recent=6, topk=7, observation=5, pool_kernel=3, pooling=pooling)
    lengths = [40, 33, 9]  # the last one is shorter than sink + recent: nothing to select
    padded = max(lengths)
    dim = 8
    for layer_idx in range(2):  # "layers": independent draws
        q = torch.randn(len(lengths), hq, padded, dim, dtype=torch.float64) * 2
        k = torch.randn(len(lengths), hkv, padded, dim, dtype=torch.float64) * 2
        valid = torch.zeros(len(lengths), padded, dtype=torch.bool)
        for b, n in enumerate(lengths):
            valid[b, padded - n :] = True
        lengths_t = valid.sum(-1)
        layer = SnapStreamLayer(layer_idx, cfg)
        index = layer.select(LayerPrompt(k, k, q, valid, dim**-0.5))
        for b, n in enumerate(lengths):
            expected = reference_snapstream(q[b, :, padded - n :], k[b, :, padded - n :], cfg)
            for h in range(hkv):
                got = {int(i) - (padded - n) for i in index[b, h] if i >= 0}
                assert got == expected[h], (b, h)


def test_snapkv_keeps_window_and_top_scores():
    torch.manual_seed(0)
    cfg = SnapKVConfig(budget=12, observation=4, pool_kernel=5, pooling="avg")
    q = torch.randn(1, 4, 30, 8, dtype=torch.float64)
    k = torch.randn(1, 2, 30, 8, dtype=torch.float64)
    valid = torch.ones(1, 30, dtype=torch.bool)
    index = SnapKVLayer(0, cfg).select(LayerPrompt(k, k, q, valid, 8**-0.5))
    scores = reference_scores(q[0], k[0], 4, 5, "avg", 0, 26)
    for h in range(2):
        prefix = sorted(range(26), key=lambda j: -scores[h][j])[:8]
        assert set(index[0, h].tolist()) == set(prefix) | set(range(26, 30))
