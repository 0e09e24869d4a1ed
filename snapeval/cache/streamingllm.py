"""StreamingLLM baseline (arXiv 2309.17453) in SnapStream's fixed layout: sinks + ring, no top-k.

Unlike the original code, keys keep the positions they were rotated with (no "pos-shift"), exactly as SnapStream
does, so the two differ only in the top-k part of the cache.
"""
from __future__ import annotations

from snapeval.cache.config import SnapStreamConfig, streamingllm_config  # noqa: F401 (re-exported)
from snapeval.cache.snapstream import SnapStreamCache


class StreamingLLMCache(SnapStreamCache):
    """A :class:`SnapStreamCache` whose config has ``topk == 0``."""

    def __init__(self, model, config: SnapStreamConfig):
        if config.topk != 0:
            raise ValueError(f"StreamingLLM keeps no top-k tokens; got topk={config.topk} (allowed: 0)")
        super().__init__(model, config)
