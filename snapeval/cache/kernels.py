"""The decode kernels: single-token attention over a compressed cache's slots, one function per kernel.

A cache decodes with the kernel its run asked for (``decode_kernel``, :mod:`snapeval.run_args`), resolved for its
device once (:func:`resolve_decode_kernel`) and handed to attention with every decode step
(:class:`snapeval.cache.attention.PendingAttention`); nothing here is a switch a caller sets for everyone else.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from snapeval.cache.kernel_shapes import SPLIT_PRODUCTS, TRITON_WAVES, decode_splits, ragged_splits, split_chunks
from snapeval.errors import SnapevalError
from snapeval.run_args import DECODE_KERNELS as RUN_ARG_KERNELS

__all__ = ["DECODE_KERNELS", "RAGGED_IN_PLACE", "SPLIT_PRODUCTS", "TRITON_WAVES", "RaggedRows", "check_decode_kernel",
           "decode_attention", "decode_splits", "flex_decode_attention", "grouped_decode_attention",
           "ragged_decode_attention", "ragged_splits", "resolve_decode_kernel", "runnable_decode_kernels",
           "split_chunks", "split_decode_attention", "triton_decode_attention"]


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
#: The names are declared with the run arguments (``decode_kernel``, :mod:`snapeval.run_args`).
DECODE_KERNELS = RUN_ARG_KERNELS


def runnable_decode_kernels(device) -> tuple[str, ...]:
    """The kernels of :data:`DECODE_KERNELS` that run on ``device`` here: ``triton`` only on CUDA with the ``triton``
    package installed."""
    import importlib.util

    gpu_ready = torch.device(device).type == "cuda" and importlib.util.find_spec("triton") is not None
    return tuple(k for k in DECODE_KERNELS if k != "triton" or gpu_ready)


def check_decode_kernel(choice: str) -> str:
    """``choice`` if it is a run's ``decode_kernel`` (``auto`` or one of :data:`DECODE_KERNELS`), else a one-line
    :class:`SnapevalError`: what a cache checks when it is built, before its device is known."""
    if choice != "auto" and choice not in DECODE_KERNELS:
        raise SnapevalError(f"decode_kernel={choice!r} is invalid; allowed: auto, {', '.join(DECODE_KERNELS)}")
    return choice


def resolve_decode_kernel(choice: str, device) -> str:
    """The kernel a cache on ``device`` decodes with, for a run argument ``decode_kernel`` (``auto`` or one of
    :data:`DECODE_KERNELS`). The rule for ``auto``, from the measurements in docs/engine.md:

    - off CUDA: ``sdpa`` (every committed CPU result was produced with its numerics);
    - on CUDA: ``triton`` where the package imports (the fastest under CUDA graphs on an H100: 1.17-1.19x the byte
      floor at the largest batch, results/bench/gpu.json), else ``split``.

    A kernel that cannot run on ``device`` is a one-line :class:`SnapevalError`."""
    device_type = torch.device(device).type
    if check_decode_kernel(choice) == "auto" and device_type != "cuda":
        return "sdpa"  # every layer of every cache resolves: the CPU's answer needs no look-up
    runnable = runnable_decode_kernels(device)
    if choice == "auto":
        return "triton" if "triton" in runnable else "split"
    if choice not in runnable:
        raise SnapevalError(f"decode_kernel={choice!r} cannot run on {device_type} here (triton runs on CUDA with "
                            f"the triton package); allowed: auto, {', '.join(runnable)}")
    return choice


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


def triton_decode_attention(query, key, value, valid=None, scaling=None) -> torch.Tensor:
    """The ``triton`` kernel (:data:`DECODE_KERNELS`): shapes as :func:`decode_attention`. Raises a one-line
    :class:`SnapevalError` where the ``triton`` package is not installed."""
    return _triton_module().triton_decode_attention(query, key, value, valid, scaling)


def _triton_module():
    """:mod:`snapeval.cache.triton_decode`, or a one-line :class:`SnapevalError` where ``triton`` does not import."""
    try:
        from snapeval.cache import triton_decode
    except ImportError as exc:
        raise SnapevalError(f"decode kernel 'triton' needs the triton package, which is not importable here ({exc}); "
                            f"allowed without it: {', '.join(k for k in DECODE_KERNELS if k != 'triton')}") from None
    return triton_decode


#: The kernels that attend over a :class:`RaggedRows` pool in one launch, in place; the others gather it into a
#: padded batch (a copy of every row at the longest row's slots), so a shared step pays only with these.
RAGGED_IN_PLACE = ("triton",)


@dataclass(frozen=True)
class RaggedRows:
    """Rows of different slot counts in one flat pool per layer (several configurations' rows decoded in one step,
    :class:`snapeval.cache.segments.SegmentedCache`): row ``r``'s KV head ``h`` holds ``slots[r]`` consecutive
    vectors from ``base[r] + h * slots[r]`` of ``keys``/``values`` ``[N, D]``, their positions at the same indices
    of ``positions`` ``[N]`` (-1: empty, masked; the same validity for every head, so head 0's is read).
    ``num_kv_heads``, ``most_slots`` (the largest of ``slots``) and ``total_slots`` (their sum) are Python ints: the
    shapes a launch is planned for, known without reading the device (a captured step never synchronises)."""

    keys: torch.Tensor
    values: torch.Tensor
    positions: torch.Tensor
    base: torch.Tensor  # [R] int64
    slots: torch.Tensor  # [R] int64
    num_kv_heads: int
    most_slots: int
    total_slots: int

    def padded(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``keys``/``values`` ``[R, Hkv, S, D]`` and ``valid`` ``[R, S]`` (``S`` = :attr:`most_slots`; a row's slots
        past its own count masked): the rows as one padded batch, gathered (a copy; the reference the ``triton``
        kernel is checked against, and the path of the other kernels)."""
        num_kv = self.num_kv_heads
        offsets = torch.arange(self.most_slots, device=self.base.device)
        inside = offsets[None, :] < self.slots[:, None]  # [R, S]
        start = self.base[:, None] + torch.arange(num_kv, device=self.base.device)[None, :] * self.slots[:, None]
        index = start[:, :, None] + torch.where(inside, offsets, 0)[:, None, :]  # [R, Hkv, S]
        valid = inside & (self.positions[index[:, 0]] >= 0)
        return self.keys[index], self.values[index], valid


def ragged_decode_attention(query, rows: RaggedRows, scaling=None, *, kernel: str = "sdpa") -> torch.Tensor:
    """Single-token attention of ``query [R, Hq, 1, D]`` over each row's own slots of a :class:`RaggedRows` pool;
    returns ``[R, 1, Hq, D]``. ``triton``: one launch over every row in place (no copy, whatever the rows' slot
    counts); another kernel: :meth:`RaggedRows.padded`, then :func:`decode_attention` with it."""
    if kernel == "triton":
        return _triton_module().ragged_decode_attention(query, rows, scaling)
    keys, values, valid = rows.padded()
    return decode_attention(query, keys, values, valid, scaling, kernel=kernel)


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
