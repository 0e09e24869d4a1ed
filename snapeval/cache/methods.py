"""Method names and their configurations, without importing torch (the sweep and CLI validate with these)."""
from __future__ import annotations

from snapeval.cache.config import DEFAULT_OBSERVATION, SnapKVConfig, SnapStreamConfig, streamingllm_config
from snapeval.errors import SnapevalError, check_choice

METHODS = ("full", "snapstream", "streamingllm", "snapkv")


def method_config(method: str, budget: int | None = None, config: SnapStreamConfig | None = None, **split):
    """The cache configuration of ``method`` for a total ``budget`` (or an explicit SnapStream ``config``).

    SnapKV's observation window defaults to 32, or half the budget when the budget is under 64.

    ``split`` may override SnapStream fields (sink, recent, topk, observation, kernel, pooling).
    Returns ``None`` for ``full``, a :class:`SnapStreamConfig` or a :class:`SnapKVConfig`.
    """
    check_choice("method", method, METHODS)
    if method == "full":
        return None
    if config is None:
        if budget is None and not split:
            raise SnapevalError(f"method={method!r} needs a budget (an integer >= 2) or a SnapStreamConfig")
        try:
            if method == "snapkv":
                keep = {k: split[k] for k in ("observation", "kernel", "pooling") if k in split}
                keep.setdefault("observation", min(DEFAULT_OBSERVATION, max(1, budget // 2)))
                return SnapKVConfig(budget=budget, **keep)
            if method == "streamingllm":
                return streamingllm_config(budget, **({"sink": split["sink"]} if "sink" in split else {}))
            if budget is None:
                return SnapStreamConfig(**split)
            config = SnapStreamConfig.from_budget(budget, **{k: v for k, v in split.items() if k != "topk"})
            if "topk" in split and split["topk"] != config.topk:
                raise ValueError(
                    f"SnapStreamConfig.topk={split['topk']} does not add up: budget {budget} = sink {config.sink} "
                    f"+ recent {config.recent} + topk {config.topk}"
                )
        except (ValueError, TypeError) as exc:
            raise SnapevalError(str(exc)) from None
    if method == "snapkv":
        return SnapKVConfig(budget=config.budget, observation=config.observation, kernel=config.kernel, pooling=config.pooling)
    if method == "streamingllm" and config.topk:
        return streamingllm_config(config.budget, sink=config.sink)
    return config


def make_cache(model, method: str = "snapstream", config=None):
    """A fresh cache for one ``generate``/forward sequence. ``config`` comes from :func:`method_config`."""
    check_choice("method", method, METHODS)
    if method == "full":
        from snapeval.cache.full import FullCache

        return FullCache(model)
    if method == "snapkv":
        from snapeval.cache.snapkv import SnapKVCache

        return SnapKVCache(model, config)
    if method == "streamingllm":
        from snapeval.cache.streamingllm import StreamingLLMCache

        return StreamingLLMCache(model, config)
    from snapeval.cache.snapstream import SnapStreamCache

    return SnapStreamCache(model, config)
