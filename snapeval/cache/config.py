"""The SnapStream budget split, validated on construction.

Paper names (arXiv 2511.03092) -> field: ``sink_token_length`` -> ``sink``, ``recent_token_length`` -> ``recent``,
``topk_length`` -> ``topk``, ``snapkv_observation_length`` -> ``observation``, ``snapkv_kernel_size`` -> ``kernel``.
The paper does not publish its split; the defaults below come from the reference code of the methods it combines
(StreamingLLM: 4 sinks; SnapKV: observation window 32, average pooling with kernel 5).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

POOLINGS = ("avg", "max")

#: Defaults used by :meth:`SnapStreamConfig.from_budget` (and documented in the README).
DEFAULT_SINK = 4
DEFAULT_OBSERVATION = 32
DEFAULT_KERNEL = 5
DEFAULT_POOLING = "avg"
DEFAULT_RECENT_FRACTION = 0.5


def _require_int(field: str, value, minimum: int, owner: str = "SnapStreamConfig") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}.{field}={value!r} is invalid; allowed: an integer >= {minimum}")


def _require_kernel_and_pooling(kernel, pooling, owner: str) -> None:
    if isinstance(kernel, bool) or not isinstance(kernel, int) or kernel < 1 or kernel % 2 == 0:
        raise ValueError(f"{owner}.kernel={kernel!r} is invalid; allowed: a positive odd integer")
    if pooling not in POOLINGS:
        raise ValueError(f"{owner}.pooling={pooling!r} is invalid; allowed: {', '.join(POOLINGS)}")


@dataclass(frozen=True)
class SnapStreamConfig:
    """Cache layout ``[sink | ring | top-k]`` of ``budget = sink + recent + topk`` slots per layer and KV head.

    Attributes:
        sink: first prompt tokens, always kept (attention sinks). ``>= 0``.
        recent: ring-buffer size: the most recent tokens, prompt tail first, then every decoded token. ``>= 1``.
        topk: middle prompt tokens kept by SnapKV selection, chosen once at the end of prefill. ``>= 0``.
        observation: number of last prompt queries that score the middle tokens. ``>= 1``; when ``topk > 0`` it
            must not exceed ``recent``, so the queries that chose the top-k stay in the cache (as SnapKV keeps its
            observation window).
        kernel: 1-D pooling kernel along the key axis (stride 1, padding ``kernel // 2``): a positive odd integer.
        pooling: ``"avg"`` (the paper's equation) or ``"max"`` (SnapKV's released code).
    """

    sink: int = DEFAULT_SINK
    recent: int = 508
    topk: int = 512
    observation: int = DEFAULT_OBSERVATION
    kernel: int = DEFAULT_KERNEL
    pooling: str = DEFAULT_POOLING

    def __post_init__(self) -> None:
        _require_int("sink", self.sink, 0)
        _require_int("recent", self.recent, 1)
        _require_int("topk", self.topk, 0)
        _require_int("observation", self.observation, 1)
        _require_kernel_and_pooling(self.kernel, self.pooling, "SnapStreamConfig")
        if self.topk > 0 and self.observation > self.recent:
            raise ValueError(
                f"SnapStreamConfig.observation={self.observation} is invalid with recent={self.recent} and "
                f"topk={self.topk}; allowed: 1..{self.recent} (the observation window must fit in the ring)"
            )

    @property
    def budget(self) -> int:
        """Total cache slots per layer and KV head: ``sink + recent + topk``."""
        return self.sink + self.recent + self.topk

    @classmethod
    def from_budget(
        cls,
        budget: int,
        *,
        sink: int = DEFAULT_SINK,
        recent: int | None = None,
        recent_fraction: float = DEFAULT_RECENT_FRACTION,
        observation: int = DEFAULT_OBSERVATION,
        kernel: int = DEFAULT_KERNEL,
        pooling: str = DEFAULT_POOLING,
    ) -> "SnapStreamConfig":
        """Split a total ``budget`` into sinks, ring and top-k.

        Defaults: 4 sinks; a ring of ``recent_fraction`` (0.5) of the budget, at least ``observation`` slots; the rest
        is top-k. Example: budget 1024 -> sink 4, recent 512, topk 508.
        """
        _require_int("budget", budget, 2)
        if not 0.0 < recent_fraction <= 1.0:
            raise ValueError(f"SnapStreamConfig.recent_fraction={recent_fraction!r} is invalid; allowed: (0, 1]")
        sink = min(sink, budget - 1)
        if recent is None:
            recent = max(min(observation, budget - sink), int(round(budget * recent_fraction)))
            recent = min(recent, budget - sink)
        topk = budget - sink - recent
        if topk < 0:
            raise ValueError(
                f"SnapStreamConfig.budget={budget} is invalid with sink={sink} and recent={recent}; "
                f"allowed: budget >= sink + recent = {sink + recent}"
            )
        return cls(sink=sink, recent=recent, topk=topk, observation=observation, kernel=kernel, pooling=pooling)

    def to_dict(self) -> dict:
        return {**asdict(self), "budget": self.budget}


@dataclass(frozen=True)
class SnapKVConfig:
    """``budget`` prompt tokens kept (observation window included); ``kernel`` odd; ``pooling`` avg or max."""

    budget: int
    observation: int = DEFAULT_OBSERVATION
    kernel: int = DEFAULT_KERNEL
    pooling: str = DEFAULT_POOLING

    def __post_init__(self):
        _require_int("budget", self.budget, 1, "SnapKVConfig")
        _require_int("observation", self.observation, 1, "SnapKVConfig")
        if self.observation > self.budget:
            raise ValueError(
                f"SnapKVConfig.observation={self.observation} is invalid; allowed: 1..budget ({self.budget})"
            )
        _require_kernel_and_pooling(self.kernel, self.pooling, "SnapKVConfig")

    def to_dict(self) -> dict:
        return asdict(self)


def streamingllm_config(budget: int, sink: int = DEFAULT_SINK) -> SnapStreamConfig:
    """``budget`` slots: ``sink`` attention sinks and a ring of ``budget - sink`` recent tokens."""
    return SnapStreamConfig.from_budget(budget, sink=sink, recent=budget - min(sink, budget - 1))
