"""snapeval: accuracy of LLMs under SnapStream KV-cache compression, paired with SN40L-simulated cost.

Public API::

    from snapeval import SnapStreamConfig, load_model, generate
    model, tokenizer = load_model("smollm2-135m-instruct")
    result = generate(model, tokenizer, ["..."], config=SnapStreamConfig.from_budget(1024), max_new_tokens=64)
    result[0].text, result[0].kv_bytes, result[0].slot_positions(layer_idx=0)
"""
from __future__ import annotations

__version__ = "0.1.0"

from snapeval.cache.config import SnapStreamConfig
from snapeval.generation import GenerationOutput, GenerationResult, generate
from snapeval.models.loading import load_model, load_tokenizer

__all__ = [
    "__version__",
    "GenerationOutput",
    "GenerationResult",
    "SnapStreamConfig",
    "generate",
    "load_model",
    "load_tokenizer",
]
