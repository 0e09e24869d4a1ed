"""The ``snapstream`` attention implementation: SDPA plus a hand-off from the compressed caches.

Hugging Face attention modules call ``past_key_values.update(...)`` and then the attention function registered
under ``config._attn_implementation``. A compressed cache needs two things the Cache API does not give it: the
queries (SnapKV scores the prompt with the last queries) and its own mask (slots hold tokens out of order, and empty
slots must be masked). So ``update`` leaves a :class:`PendingAttention` for its layer, and the attention function
below picks it up, right after, in the same layer:

- prefill: attention runs unchanged over the full prompt (HF's causal + padding mask), then ``after(query, mask,
  scaling)`` compresses that layer's cache once;
- decode: attention runs over the cache slots with the cache's own validity/visibility mask, through the decode
  kernel of the device (:func:`decode_attention`): grouped-query heads read their KV head in place (no K/V copy).

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
    if pending.replace_mask and query.shape[2] == 1:
        kernel = decode_kernel(query.device)
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


def grouped_decode_attention(query, key, value, mask, scaling=None) -> torch.Tensor:
    """Masked single-query attention with grouped-query heads, without copying K/V.

    Hugging Face's SDPA path repeats every KV head ``Hq / Hkv`` times (``repeat_kv``) whenever a mask is given,
    because SDPA's own GQA support needs ``attn_mask=None``; for a decode step over a masked cache (empty slots, or
    the engine's rows) that copy dominated a small model's step on CPU. With one query per row, a group's query
    heads can be laid out as that group's queries instead: the same arithmetic per head, the mask broadcast.

    Shapes: ``query [B, Hq, 1, D]``, ``key``/``value`` ``[B, Hkv, K, D]``, ``mask`` bool ``[B, 1, 1, K]``
    (True = attend); returns ``[B, 1, Hq, D]``.
    """
    batch, num_heads, _, head_dim = query.shape
    num_kv = key.shape[1]
    grouped = query.reshape(batch, num_kv, num_heads // num_kv, head_dim)  # [B, Hkv, G, D]
    out = torch.nn.functional.scaled_dot_product_attention(grouped, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(batch, 1, num_heads, head_dim)  # [B, Hkv, G, D] is [B, Hq, 1, D] is [B, 1, Hq, D]


# --- decode kernels -------------------------------------------------------------------------------------------------
#: The kernels a single-token decode step over a cache's slots can run (:func:`decode_attention`):
#:
#: - ``sdpa``: PyTorch's ``scaled_dot_product_attention``, unmasked with ``enable_gqa`` when every slot is valid
#:   (Hugging Face's path), else :func:`grouped_decode_attention` (masked, one query per KV head group). On a GPU a
#:   masked call runs the memory-efficient kernel, whose grid is ``batch x heads``: one row's 8 KV heads occupy 8 of
#:   an H100's 132 SMs while they stream every key.
#: - ``split``: split-KV ("flash-decoding") in plain PyTorch: the scores of a KV head group are one batched matrix
#:   product over every slot (float32 output), softmax over the valid slots, and the weighted values summed over
#:   ``chunks`` slices of the slots (batched products over ``batch x Hkv x chunks``, the split), so every key is
#:   read once by many SMs and nothing is copied per query head. No compilation, capturable by CUDA graphs.
#: - ``flex``: PyTorch's FlexAttention (``torch.nn.attention.flex_attention``, compiled; its decoding kernel splits
#:   the keys), ``enable_gqa=True``, the empty slots masked by a score modification reading the validity row.
#: - ``triton``: fused split-KV in Triton (:mod:`snapeval.cache.triton_decode`): a program per row x KV head x slice
#:   of the slots reads its keys and values once (online softmax, float32 accumulation, the group's query heads
#:   together), a second launch combines the slices; no float32 scores written. Needs the ``triton`` package (GPU).
DECODE_KERNELS = ("sdpa", "split", "flex", "triton")
#: The kernel each device type decodes with (:func:`set_decode_kernel`). The CPU keeps ``sdpa``, whose numerics
#: every committed result was produced with; on a GPU ``split`` (``docs/engine.md``: chosen by the H100
#: measurement of ``benchmarks/gpu.py``'s kernel section).
_DEFAULT_KERNELS = {"cpu": "sdpa", "cuda": "split"}
_decode_kernels = dict(_DEFAULT_KERNELS)


def runnable_decode_kernels(device) -> tuple[str, ...]:
    """The kernels of :data:`DECODE_KERNELS` that run on ``device`` here: ``triton`` only on CUDA with the ``triton``
    package installed."""
    import importlib.util

    gpu_ready = torch.device(device).type == "cuda" and importlib.util.find_spec("triton") is not None
    return tuple(k for k in DECODE_KERNELS if k != "triton" or gpu_ready)


def set_decode_kernel(kernel: str | None, device_type: str = "cuda") -> None:
    """Decode with ``kernel`` (one of :data:`DECODE_KERNELS`) on ``device_type``; ``None`` restores the default."""
    if kernel is not None and kernel not in DECODE_KERNELS:
        raise SnapevalError(f"decode kernel {kernel!r} is invalid; allowed: {', '.join(DECODE_KERNELS)}")
    _decode_kernels[device_type] = kernel if kernel is not None else _DEFAULT_KERNELS.get(device_type, "sdpa")


def decode_kernel(device) -> str:
    """The kernel a decode step on ``device`` runs (:data:`DECODE_KERNELS`)."""
    return _decode_kernels.get(torch.device(device).type, "sdpa")


def decode_attention(query, key, value, valid=None, scaling=None, *, kernel: str = "split") -> torch.Tensor:
    """Single-token attention over a cache's slots with grouped-query heads, without copying keys or values.

    Shapes: ``query [B, Hq, 1, D]``, ``key``/``value`` ``[B, Hkv, S, D]`` (``Hq`` a multiple of ``Hkv``: query head
    ``h`` reads KV head ``h // (Hq / Hkv)``, as ``repeat_kv`` lays them out), ``valid`` bool ``[B, S]`` (True:
    attend; ``None``: every slot); returns ``[B, 1, Hq, D]``.
    """
    if kernel == "split":
        if torch.compiler.is_compiling():  # one opaque call to inductor: its own fusion of these products was slower
            return torch.ops.snapeval.split_decode_attention(query, key, value, valid, scaling)
        return split_decode_attention(query, key, value, valid, scaling)
    if kernel == "triton":
        if torch.compiler.is_compiling():  # an opaque call: dynamo does not trace the launches
            return torch.ops.snapeval.triton_decode_attention(query, key, value, valid, scaling)
        return triton_decode_attention(query, key, value, valid, scaling)
    if kernel == "flex":
        return flex_decode_attention(query, key, value, valid, scaling)
    if kernel != "sdpa":
        raise SnapevalError(f"decode kernel {kernel!r} is invalid; allowed: {', '.join(DECODE_KERNELS)}")
    if valid is None:
        out = torch.nn.functional.scaled_dot_product_attention(query, key, value, scale=scaling,
                                                               enable_gqa=query.shape[1] != key.shape[1])
        return out.transpose(1, 2)
    return grouped_decode_attention(query, key, value, valid[:, None, None, :], scaling)


#: The products the ``split`` kernel aims for (batch x KV heads x slices of the slots): enough to fill a GPU's SMs
#: several times over (:func:`split_chunks`; ``benchmarks/gpu.py`` times 64, 256 and 1024 and keeps the fastest).
SPLIT_PRODUCTS = 256


def split_chunks(slots: int, rows: int, products: int | None = None) -> int:
    """How many slices ``split`` sums the weighted values over: the fewest that give ``rows`` (batch x KV heads)
    times the slices at least ``products`` (default :data:`SPLIT_PRODUCTS`), each slice at least 256 slots and a
    divisor of ``slots`` (a slice is a view of the cache, never a copy); without such a divisor, the most slices
    below it."""
    most = slots // 256
    want = max(1, -(-(products or SPLIT_PRODUCTS) // rows))
    for chunks in range(want, most + 1):
        if slots % chunks == 0:
            return chunks
    for chunks in range(min(want, most), 1, -1):
        if slots % chunks == 0:
            return chunks
    return 1


#: Programs the ``triton`` kernel aims for, per multiprocessor of the GPU (:func:`decode_splits`).
TRITON_WAVES = 3


def decode_splits(slots: int, rows: int, multiprocessors: int, block: int) -> tuple[int, int]:
    """``(splits, slice_len)`` of the ``triton`` kernel: ``rows`` (batch x KV heads) times ``splits`` at least
    :data:`TRITON_WAVES` times ``multiprocessors`` programs (fewer than twice that; at most one slice per tile), each
    slice ``slice_len`` slots (a multiple of ``block``), the slices covering ``slots`` with none empty (the last may
    be shorter). Depends only on shapes: one CUDA graph per shape."""
    if slots < 1 or rows < 1 or multiprocessors < 1 or block < 1:
        raise SnapevalError(f"decode_splits needs positive slots, rows, multiprocessors and block; got "
                            f"{slots}, {rows}, {multiprocessors}, {block}")
    tiles = -(-slots // block)
    want = max(1, min(tiles, -(-TRITON_WAVES * multiprocessors // rows)))
    slice_len = (tiles // want) * block  # at least ``want`` slices, fewer than twice as many
    return -(-slots // slice_len), slice_len


def triton_decode_attention(query, key, value, valid=None, scaling=None) -> torch.Tensor:
    """The ``triton`` kernel (:data:`DECODE_KERNELS`): shapes as :func:`decode_attention`. Raises a one-line
    :class:`SnapevalError` where the ``triton`` package is not installed."""
    try:
        from snapeval.cache import triton_decode
    except ImportError as exc:
        raise SnapevalError(f"decode kernel 'triton' needs the triton package, which is not importable here ({exc}); "
                            f"allowed without it: {', '.join(k for k in DECODE_KERNELS if k != 'triton')}") from None
    return triton_decode.triton_decode_attention(query, key, value, valid, scaling)


_bmm_float32_ok: bool | None = None


def _bmm_float32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` (batched) with a float32 result (float64 stays float64): half-precision products accumulate and
    round to float32 (cuBLAS's ``out_dtype``; elsewhere the product is converted), not to an 8-bit mantissa."""
    global _bmm_float32_ok
    if a.dtype in (torch.float16, torch.bfloat16) and a.device.type == "cuda" and _bmm_float32_ok is not False:
        try:
            out = torch.bmm(a, b, out_dtype=torch.float32)
            _bmm_float32_ok = True
            return out
        except (RuntimeError, TypeError):
            _bmm_float32_ok = False
    out = torch.bmm(a, b)
    return out if out.dtype == torch.float64 else out.float()


def split_decode_attention(query, key, value, valid=None, scaling=None) -> torch.Tensor:
    """The ``split`` kernel (:data:`DECODE_KERNELS`): shapes as :func:`decode_attention`."""
    batch, num_heads, _, head_dim = query.shape
    num_kv, slots = key.shape[1], key.shape[2]
    group = num_heads // num_kv
    scaling = head_dim**-0.5 if scaling is None else scaling
    rows = batch * num_kv
    grouped = query.reshape(rows, group, head_dim)  # [B*Hkv, G, D]
    scores = _bmm_float32(grouped, key.reshape(rows, slots, head_dim).transpose(1, 2)) * scaling  # [B*Hkv, G, S]
    if valid is not None:
        hidden = ~valid[:, None, None, :].expand(batch, num_kv, 1, slots).reshape(rows, 1, slots)
        scores = scores.masked_fill(hidden, float("-inf"))
    probs = scores.softmax(dim=-1).to(value.dtype)
    chunks = split_chunks(slots, rows)
    width = slots // chunks
    probs = probs.reshape(rows, group, chunks, width).transpose(1, 2).reshape(rows * chunks, group, width)
    partial = _bmm_float32(probs, value.reshape(rows * chunks, width, head_dim))  # [B*Hkv*C, G, D]
    out = partial.reshape(rows, chunks, group, head_dim).sum(dim=1)
    return out.to(query.dtype).reshape(batch, 1, num_heads, head_dim)


def _opaque_decode_op(kernel: Callable) -> None:
    """Register ``kernel`` (shapes as :func:`decode_attention`) as the operator ``snapeval::<its name>``, which a
    compiled decode step calls as it is (the H100 run: inductor's own kernels for the ``split`` products and softmax
    made a 14-row step 2.7x slower than eager; dynamo does not trace Triton launches); CUDA graphs capture it."""

    def op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, valid: torch.Tensor | None,
           scaling: float | None) -> torch.Tensor:
        return kernel(query, key, value, valid, scaling)

    registered = torch.library.custom_op(f"snapeval::{kernel.__name__}", op, mutates_args=())

    @registered.register_fake
    def _(query, key, value, valid, scaling):
        batch, heads, _, dim = query.shape
        return query.new_empty(batch, 1, heads, dim)


_opaque_decode_op(split_decode_attention)
_opaque_decode_op(triton_decode_attention)


_flex_compiled = None


def _flex_decode(query, key, value, valid, scaling):
    from torch.nn.attention.flex_attention import flex_attention

    def keep_valid(score, b, h, q_idx, kv_idx):
        return torch.where(valid[b, kv_idx], score, -float("inf"))

    return flex_attention(query, key, value, score_mod=keep_valid, scale=scaling, enable_gqa=True)


def flex_decode_attention(query, key, value, valid=None, scaling=None) -> torch.Tensor:
    """The ``flex`` kernel (:data:`DECODE_KERNELS`): shapes as :func:`decode_attention`. Compiled once per shape
    (eagerly, FlexAttention would run its unfused reference); inside a compiled step it is traced with the step."""
    global _flex_compiled
    if valid is None:
        valid = torch.ones(key.shape[0], key.shape[2], dtype=torch.bool, device=key.device)
    if torch.compiler.is_compiling() or query.device.type == "cpu":
        out = _flex_decode(query, key, value, valid, scaling)
    else:
        if _flex_compiled is None:
            _flex_compiled = torch.compile(_flex_decode, dynamic=False, fullgraph=True)
        out = _flex_compiled(query, key, value, valid, scaling)
    return out.transpose(1, 2)


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
