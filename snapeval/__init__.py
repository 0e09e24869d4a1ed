"""snapeval: accuracy of LLMs under SnapStream KV-cache compression, paired with SN40L-simulated cost.

Public API (imported lazily, so ``import snapeval`` and the CLI start without loading torch)::

    from snapeval import SnapStreamConfig, load_model, generate
    model, tokenizer = load_model("smollm2-135m-instruct")
    result = generate(model, tokenizer, ["..."], config=SnapStreamConfig.from_budget(1024), max_new_tokens=64)
    result[0].text, result[0].kv_bytes, result[0].slot_positions(layer_idx=0)
"""
from __future__ import annotations

import importlib

__version__ = "0.3.0"

_EXPORTS = {
    "SnapStreamConfig": "snapeval.cache.config",
    "StreamingLLMConfig": "snapeval.cache.config",
    "SnapKVConfig": "snapeval.cache.config",
    "FullConfig": "snapeval.cache.config",
    "resolve_method": "snapeval.cache.methods",
    "GenerationOutput": "snapeval.generation",
    "GenerationResult": "snapeval.generation",
    "generate": "snapeval.generation",
    "load_model": "snapeval.models.loading",
    "load_tokenizer": "snapeval.models.loading",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'snapeval' has no attribute {name!r}")
