"""The ``triton`` decode kernel: fused split-KV ("flash-decoding") attention for one query token, in Triton.

Two launches. The first has a program per (row x KV head, slice of the slots): it loads the ``G = Hq / Hkv`` query
heads of its KV head group once (padded to :data:`GROUP_ROWS` rows for ``tl.dot``), streams its slice of keys and
values in :data:`BLOCK_N`-slot tiles, reading each once (half-precision or float32 inputs, float32 accumulation),
with an online softmax (running maximum and sum), the slots whose ``valid`` is False masked, and writes its partial
maximum, sum and weighted values. The second has a program per (row x KV head, query head of the group) and combines
the slices. No host synchronisation and no data-dependent shape (CUDA graphs capture both launches).

The same launches serve a ragged pool (:class:`snapeval.cache.kernels.RaggedRows`: several configurations' rows of
different slot counts, decoded in one step): each program reads its row's first vector and slot count; the slices are
of equal work over the whole pool (:func:`~snapeval.cache.kernel_shapes.ragged_splits`), so a long row is split
where short ones are not, and a slice past a shorter row's slots loads nothing.

Imported only where the kernel is asked for (:func:`snapeval.cache.kernels.decode_attention`): ``triton`` is
absent from CPU installs. Triton's interpreter (``TRITON_INTERPRET=1``) runs it on CPU tensors (the tests do).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from snapeval.cache.kernel_shapes import decode_splits, ragged_splits

#: Slots per tile (a slice of the slots is a multiple of it).
BLOCK_N = 64
#: Query rows of a program's ``tl.dot`` (the group's ``G`` heads, padded and masked; ``tl.dot`` needs 16).
GROUP_ROWS = 16

_sm_counts: dict[int, int] = {}


def _multiprocessors(device: torch.device) -> int:
    if device.type != "cuda":
        return 132  # the interpreter: an H100's count, so that the tests split as the GPU would
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _sm_counts:
        _sm_counts[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _sm_counts[index]


@triton.jit
def _split_kernel(q_ptr, k_ptr, v_ptr, valid_ptr, base_ptr, row_slots_ptr, m_ptr, l_ptr, acc_ptr,
                  stride_qb, stride_qh, stride_qd,
                  stride_kb, stride_kh, stride_ks, stride_kd,
                  stride_vb, stride_vh, stride_vs, stride_vd,
                  stride_valid_b, stride_valid_s,
                  num_kv, slots, slice_len, num_splits, scaling,
                  GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_G: tl.constexpr,
                  BLOCK: tl.constexpr, HAS_VALID: tl.constexpr, IEEE: tl.constexpr, RAGGED: tl.constexpr):
    row = tl.program_id(0)  # batch row x KV head
    split = tl.program_id(1)
    b = (row // num_kv).to(tl.int64)  # b x a row's stride can pass 2**31 elements
    h = (row % num_kv).to(tl.int64)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK)
    g_ok = offs_g < GROUP
    d_ok = offs_d < HEAD_DIM
    q = tl.load(q_ptr + b * stride_qb + (h * GROUP + offs_g)[:, None] * stride_qh + offs_d[None, :] * stride_qd,
                mask=g_ok[:, None] & d_ok[None, :], other=0.0)
    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    lo = split * slice_len
    if RAGGED:  # row b's head h: its own slot count, from its own first vector of the flat pool
        first = tl.load(base_ptr + b)
        limit = tl.load(row_slots_ptr + b)
        k_base = k_ptr + (first + h * limit) * stride_ks
        v_base = v_ptr + (first + h * limit) * stride_vs
        valid_base = valid_ptr + first * stride_valid_s  # head 0's positions: the same validity for every head
        span = tl.maximum(tl.minimum(slice_len, limit - lo), 0)  # a slice past a short row's slots: no tile
    else:
        limit = slots
        k_base = k_ptr + b * stride_kb + h * stride_kh
        v_base = v_ptr + b * stride_vb + h * stride_vh
        valid_base = valid_ptr + b * stride_valid_b
        span = slice_len
    for start in range(0, span, BLOCK):  # the last slice's tiles past the slots are masked (no load)
        n = lo + start + offs_n
        n_ok = n < limit
        k = tl.load(k_base + n[:, None] * stride_ks + offs_d[None, :] * stride_kd,
                    mask=n_ok[:, None] & d_ok[None, :], other=0.0)
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = s * scaling  # [BLOCK_G, BLOCK] float32
        keep = n_ok
        if HAS_VALID and RAGGED:  # a position, -1 for an empty slot
            keep = keep & (tl.load(valid_base + n * stride_valid_s, mask=n_ok, other=-1) >= 0)
        elif HAS_VALID:
            keep = keep & (tl.load(valid_base + n * stride_valid_s, mask=n_ok, other=0) != 0)
        s = tl.where(keep[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # every slot so far masked: no inf - inf
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + n[:, None] * stride_vs + offs_d[None, :] * stride_vd,
                    mask=n_ok[:, None] & d_ok[None, :], other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    part = row * num_splits + split  # partials laid out [B*Hkv, splits, G(, D)]
    tl.store(m_ptr + part * GROUP + offs_g, m_i, mask=g_ok)
    tl.store(l_ptr + part * GROUP + offs_g, l_i, mask=g_ok)
    tl.store(acc_ptr + (part * GROUP + offs_g)[:, None] * HEAD_DIM + offs_d[None, :], acc,
             mask=g_ok[:, None] & d_ok[None, :])


@triton.jit
def _combine_kernel(m_ptr, l_ptr, acc_ptr, out_ptr, num_splits,
                    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
                    CHUNK_S: tl.constexpr):
    row = tl.program_id(0)  # batch row x KV head
    g = tl.program_id(1)  # query head of the group
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    m = tl.load(m_ptr + (row * num_splits + offs_s) * GROUP + g, mask=offs_s < num_splits, other=float("-inf"))
    m_all = tl.max(m, 0)
    m_safe = tl.where(m_all == float("-inf"), 0.0, m_all)
    total = tl.zeros([CHUNK_S], dtype=tl.float32)
    acc = tl.zeros([CHUNK_S, BLOCK_D], dtype=tl.float32)
    offs_c = tl.arange(0, CHUNK_S)
    for start in range(0, num_splits, CHUNK_S):  # CHUNK_S slices at a time: few registers however many slices
        s_ok = start + offs_c < num_splits
        part = (row * num_splits + start + offs_c) * GROUP + g
        weight = tl.exp(tl.load(m_ptr + part, mask=s_ok, other=float("-inf")) - m_safe)  # masked slice: 0
        total += tl.load(l_ptr + part, mask=s_ok, other=0.0) * weight
        acc += tl.load(acc_ptr + part[:, None] * HEAD_DIM + offs_d[None, :], mask=s_ok[:, None] & d_ok[None, :],
                       other=0.0) * weight[:, None]
    norm = tl.sum(total, 0)
    norm = tl.where(norm == 0.0, 1.0, norm)  # every slot of the row masked: zeros, not NaN
    out = tl.sum(acc, 0) / norm
    # out [B, 1, Hq, D] contiguous: (row x KV head) x G + g is the query head's row
    tl.store(out_ptr + (row * GROUP + g) * HEAD_DIM + offs_d, out.to(out_ptr.dtype.element_ty), mask=d_ok)


def triton_decode_attention(query, key, value, valid=None, scaling=None) -> torch.Tensor:
    """The ``triton`` kernel (:data:`snapeval.cache.kernels.DECODE_KERNELS`): shapes as
    :func:`snapeval.cache.kernels.decode_attention` (``query [B, Hq, 1, D]``, ``key``/``value`` ``[B, Hkv, S, D]``,
    ``valid`` bool ``[B, S]`` or None; returns ``[B, 1, Hq, D]``)."""
    if valid is None:
        valid_arg, valid_strides = key, (0, 0)  # never read (HAS_VALID False)
    else:
        valid_arg = valid.view(torch.uint8) if valid.dtype == torch.bool else valid
        valid_strides = (valid_arg.stride(0), valid_arg.stride(1))
    return _launch(query, key, value, key.stride(), value.stride(), valid_arg, valid_strides, key.shape[1],
                   key.shape[2], scaling, has_valid=valid is not None)


def ragged_decode_attention(query, rows, scaling=None) -> torch.Tensor:
    """The ``triton`` kernel over a :class:`snapeval.cache.kernels.RaggedRows` pool, in place: ``query [R, Hq, 1,
    D]``, each row over its own ``slots[r]`` slots (slices of equal work over the pool, :func:`ragged_splits`; a
    shorter row's slices past its slots load nothing); returns ``[R, 1, Hq, D]``."""
    keys, values, positions = rows.keys, rows.values, rows.positions
    splits = ragged_splits(rows.most_slots, rows.total_slots, rows.num_kv_heads, _multiprocessors(query.device),
                           BLOCK_N)
    return _launch(query, keys, values, (0, 0, keys.stride(0), keys.stride(1)),
                   (0, 0, values.stride(0), values.stride(1)), positions, (0, positions.stride(0)), rows.num_kv_heads,
                   rows.most_slots, scaling, has_valid=True, ragged=(rows.base, rows.slots), splits=splits)


def _launch(query, key, value, key_strides, value_strides, valid_arg, valid_strides, num_kv: int, slots: int,
            scaling, *, has_valid: bool, ragged=None, splits: tuple[int, int] | None = None) -> torch.Tensor:
    """The two launches, for ``num_kv`` KV heads of (at most) ``slots`` slots per row: ``key_strides``/
    ``value_strides`` (batch, head, slot, dim); ``ragged``: the rows' ``(base, slots)`` of a flat pool, whose
    ``valid_arg`` is its positions; ``splits``: ``(splits, slice_len)`` (default :func:`decode_splits`)."""
    batch, num_heads, _, head_dim = query.shape
    group = num_heads // num_kv
    scaling = head_dim**-0.5 if scaling is None else float(scaling)
    rows = batch * num_kv
    num_splits, slice_len = splits or decode_splits(slots, rows, _multiprocessors(query.device), BLOCK_N)
    parts = query.new_empty(rows, num_splits, group, dtype=torch.float32)
    m, l = parts, torch.empty_like(parts)
    acc = query.new_empty(rows, num_splits, group, head_dim, dtype=torch.float32)
    out = query.new_empty(batch, 1, num_heads, head_dim)
    block_d = triton.next_power_of_2(head_dim)
    base, row_slots = ragged if ragged is not None else (query, query)  # never read unless ragged
    _split_kernel[(rows, num_splits)](
        query, key, value, valid_arg, base, row_slots, m, l, acc,
        query.stride(0), query.stride(1), query.stride(3),
        *key_strides, *value_strides,
        valid_strides[0], valid_strides[1],
        num_kv, slots, slice_len, num_splits, scaling,
        GROUP=group, HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_G=max(GROUP_ROWS, triton.next_power_of_2(group)),
        BLOCK=BLOCK_N, HAS_VALID=has_valid, IEEE=query.dtype == torch.float32, RAGGED=ragged is not None,
        num_warps=4, num_stages=2,
    )
    _combine_kernel[(rows, group)](
        m, l, acc, out, num_splits,
        GROUP=group, HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_S=triton.next_power_of_2(num_splits), CHUNK_S=16,
        num_warps=4,
    )
    return out
