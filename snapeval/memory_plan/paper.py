"""The paper-scale prediction: the plan of the paper's Llama grid for LongBench-v2 at 128k tokens."""
from __future__ import annotations

from snapeval.memory_plan.records import Item
from snapeval.memory_plan.search import plan_group
from snapeval.memory_plan.shape import ModelShape
from snapeval.memory_plan.units import MARGIN_FRACTION

#: LongBench-v2 at Llama-3.1-8B's full context: prompts cut to 128k tokens less the 128 to generate
#: (``configs/paper_llama.yaml``).
PAPER_PROMPT, PAPER_NEW = 131072 - 128, 128
PAPER_BUDGETS = (1024, 2048, 4096, 8192, 16384)


def predict_paper_scale(device_bytes: float = 80e9, chunk: int = 8, model: str = "llama-3.1-8b-instruct") -> GroupPlan:
    """The plan of the paper's Llama grid (full, SnapStream, StreamingLLM and SnapKV at 1k-16k tokens:
    ``configs/paper_llama.yaml``) for ``chunk`` LongBench-v2 items of 128k tokens, in bfloat16, on one GPU of
    ``device_bytes`` (less the margin), the weights already loaded. Raises if it does not fit."""
    from snapeval.cache import resolve_method

    shape = ModelShape.of_preset(model, dtype_bytes=2)
    configs = [resolve_method("full")] + [resolve_method(method, budget) for method in ("snapstream", "streamingllm",
                                                                                       "snapkv")
                                          for budget in PAPER_BUDGETS]
    window = max(c.window_queries() for c in configs)
    return plan_group(shape, configs, [Item(PAPER_PROMPT, PAPER_NEW)] * chunk, chunk=chunk, window=window,
                      budget=int(device_bytes * (1 - MARGIN_FRACTION)), in_use=shape.weight_bytes, device="cuda:0",
                      captured=True)
