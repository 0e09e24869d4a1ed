"""Draft-attention importance of every prompt token (speculative prefill's scoring step).

The draft prefills the prompt and greedily decodes ``lookahead`` tokens. Attention runs through a registered
implementation, ``specprefill_capture`` (exactly SDPA), that records each layer's prompt keys (at prefill, before a
sliding-window cache can drop them) and the query of the last prompt token and of every look-ahead token. Then, per
layer, with GQA keys expanded to the query heads:

    attn[h, q, t] = softmax_t(scaling * <query[h, q], key[h, t]>)        over the T prompt keys only
    attn          = avg_pool1d(attn, pool_kernel) along t                 (optional)
    score[t]      = mean_q  max_{layer, h} attn[h, q, t]
"""
from __future__ import annotations

import contextlib
import threading

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from snapeval.models.devices import input_device

ATTN_IMPLEMENTATION = "specprefill_capture"


class _Recorder:
    """Per-layer prompt keys ``[Hkv, T, D]``, queries ``[Hq, 1, D]`` per forward, and the layer's scaling."""

    def __init__(self, prompt_len: int):
        self.prompt_len = prompt_len
        self.keys: dict[int, torch.Tensor] = {}
        self.queries: dict[int, list[torch.Tensor]] = {}
        self.scaling: dict[int, float] = {}

    def record(self, layer: int, query: torch.Tensor, key: torch.Tensor, scaling: float) -> None:
        if layer not in self.keys:
            self.keys[layer] = key[0, :, : self.prompt_len]
            self.scaling[layer] = scaling
        self.queries.setdefault(layer, []).append(query[0, :, -1:])


_local = threading.local()


def _capture_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """SDPA attention that also hands ``query [B, Hq, Q, D]`` and ``key [B, Hkv, K, D]`` to the active recorder."""
    recorder = getattr(_local, "recorder", None)
    if recorder is not None:
        recorder.record(module.layer_idx, query, key, scaling if scaling is not None else query.shape[-1] ** -0.5)
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)


AttentionInterface.register(ATTN_IMPLEMENTATION, _capture_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_IMPLEMENTATION, sdpa_mask)


@contextlib.contextmanager
def _recording(model, prompt_len: int):
    previous = model.config._attn_implementation
    model.set_attn_implementation(ATTN_IMPLEMENTATION)
    _local.recorder = recorder = _Recorder(prompt_len)
    try:
        yield recorder
    finally:
        _local.recorder = None
        model.set_attn_implementation(previous)


@torch.inference_mode()
def token_importance(model, input_ids, lookahead: int = 8, pool_kernel: int = 13) -> torch.Tensor:
    """One importance score per prompt token, float32 ``[T]`` (see the module docstring).

    Args:
        model: a Hugging Face decoder whose attention goes through the functional attention interface.
        input_ids: the draft's prompt tokens, ``[T]`` or ``[1, T]`` (a single prompt, no padding).
        lookahead: greedy tokens decoded after the prompt whose queries also score it.
        pool_kernel: odd width of the average pooling along the prompt (1 = none).
    """
    ids = torch.as_tensor(input_ids).reshape(1, -1).to(input_device(model))
    length = ids.shape[1]
    with _recording(model, length) as recorder:
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        for _ in range(lookahead):
            token = out.logits[:, -1].argmax(dim=-1, keepdim=True)
            out = model(input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1)
    if not recorder.keys:
        raise RuntimeError(f"{type(model).__name__}: no attention call went through {ATTN_IMPLEMENTATION!r}")
    best = None
    for layer, keys in recorder.keys.items():
        query = torch.cat(recorder.queries[layer], dim=1).float()  # [Hq, Q, D]
        keys = keys.float().repeat_interleave(query.shape[0] // keys.shape[0], dim=0)  # [Hq, T, D]
        attn = torch.softmax(recorder.scaling[layer] * query @ keys.transpose(1, 2), dim=-1)  # [Hq, Q, T]
        if pool_kernel > 1:
            heads, queries, _ = attn.shape
            attn = F.avg_pool1d(
                attn.reshape(heads * queries, 1, length), pool_kernel, stride=1, padding=pool_kernel // 2,
                count_include_pad=False,
            ).reshape(heads, queries, length)
        layer_best = attn.amax(dim=0)  # [Q, T]
        best = layer_best if best is None else torch.maximum(best, layer_best)
    return best.mean(dim=0).cpu()
