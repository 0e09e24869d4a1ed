"""KV caches: SnapStream and the baselines it is compared with, one method per file.

=============== ============================== ======================================================
method          cache                          what is kept
=============== ============================== ======================================================
``full``        :class:`FullCache`             everything (Hugging Face ``DynamicCache``)
``snapstream``  :class:`SnapStreamCache`       sinks + ring of recent tokens + SnapKV top-k, fixed size
``streamingllm``:class:`StreamingLLMCache`     sinks + ring of recent tokens, fixed size
``snapkv``      :class:`SnapKVCache`           SnapKV selection + observation window, grows in decode
=============== ============================== ======================================================

The table itself (names, configuration and cache classes) is :data:`METHOD_TABLE` in :mod:`snapeval.cache.methods`;
installed packages add theirs through the ``snapeval.methods`` entry points (``snapeval methods`` lists every one).
"""
from __future__ import annotations

import importlib

from snapeval.cache.config import (
    FullConfig,
    MethodConfig,
    SnapKVConfig,
    SnapStreamConfig,
    StreamingLLMConfig,
    streamingllm_config,
)
from snapeval.cache.methods import METHOD_TABLE, METHODS, MethodInfo, make_cache, method_info, resolve_method

_CACHES = {
    "FullCache": "snapeval.cache.full",
    "SnapKVCache": "snapeval.cache.snapkv",
    "SnapStreamCache": "snapeval.cache.snapstream",
    "StreamingLLMCache": "snapeval.cache.streamingllm",
}


def __getattr__(name: str):  # the caches need torch: import them on first use
    if name in _CACHES:
        return getattr(importlib.import_module(_CACHES[name]), name)
    raise AttributeError(f"module 'snapeval.cache' has no attribute {name!r}")


__all__ = [
    "METHODS",
    "METHOD_TABLE",
    "FullCache",
    "FullConfig",
    "MethodConfig",
    "MethodInfo",
    "SnapKVCache",
    "SnapKVConfig",
    "SnapStreamCache",
    "SnapStreamConfig",
    "StreamingLLMCache",
    "StreamingLLMConfig",
    "make_cache",
    "method_info",
    "resolve_method",
    "streamingllm_config",
]
