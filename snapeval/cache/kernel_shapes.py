"""Shape arithmetic of the split-KV decode kernels: how many slices of the slots each one sums over.

Pure integer functions of the shapes (one CUDA graph per shape), shared by :mod:`snapeval.cache.kernels` (the
``split`` kernel) and :mod:`snapeval.cache.triton_decode` (the ``triton`` kernel); imports nothing but the errors.
"""
from __future__ import annotations

from snapeval.errors import SnapevalError

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


def ragged_splits(most_slots: int, total_slots: int, num_kv: int, multiprocessors: int, block: int
                  ) -> tuple[int, int]:
    """``(splits, slice_len)`` of the ``triton`` kernel over a ragged pool (rows of different slot counts, the longest
    ``most_slots``, ``total_slots`` summed over rows, each with ``num_kv`` KV heads): slices of equal *work*, the
    pool's slot-heads over :data:`TRITON_WAVES` times ``multiprocessors`` programs (a multiple of ``block``, at most
    the longest row), so that a long row (a full cache among compressed ones) is split where the short rows are not
    and no program streams a whole long row alone. A short row's slices past its slots load nothing."""
    if most_slots < 1 or total_slots < most_slots or num_kv < 1 or multiprocessors < 1 or block < 1:
        raise SnapevalError(f"ragged_splits needs 1 <= most_slots <= total_slots and positive heads, "
                            f"multiprocessors and block; got {most_slots}, {total_slots}, {num_kv}, "
                            f"{multiprocessors}, {block}")
    per_program = -(-total_slots * num_kv // (TRITON_WAVES * multiprocessors))
    slice_len = min(-(-per_program // block), -(-most_slots // block)) * block
    return -(-most_slots // slice_len), slice_len
