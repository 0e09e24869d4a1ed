"""StreamingLLM baseline (arXiv 2309.17453) in SnapStream's fixed layout: sinks + ring, no top-k.

Unlike the original code, keys keep the positions they were rotated with (no "pos-shift"), exactly as SnapStream
does, so the two differ only in the top-k part of the cache.
"""
from __future__ import annotations

from snapeval.cache.config import StreamingLLMConfig
from snapeval.cache.snapstream import SnapStreamCache


class StreamingLLMCache(SnapStreamCache):
    """A :class:`SnapStreamCache` laid out by a :class:`StreamingLLMConfig` (``topk`` is always 0)."""

    config_class = StreamingLLMConfig
