"""NVIDIA kvpress's presses as methods of the table: ``method=kvpress:<PressName>`` with the press's own arguments.

The budget means what it means for every other method: tokens kept per layer and KV head at the end of prefill. It
is turned into kvpress's ``compression_ratio`` per prompt (``1 - budget / prompt_length``, nudged by half a token so
that kvpress's ``int(k_len * (1 - ratio))`` keeps exactly ``budget``); prompts that fit are not compressed. Presses
compress during the prefill only (kvpress's hooks on the attention layers), so the cache then grows by one slot per
decoded token, like ``snapkv``: :class:`KVPressCache` is a :class:`~snapeval.cache.full.FullCache` (Hugging Face
``DynamicCache``) whose prefill runs under the press, and decoding uses explicit positions (the compressed cache is
shorter than the sequence). Presses that keep a different number of tokens per head or per layer (AdaKV,
PyramidKV, DuoAttention, ...) keep ``budget`` on average; the measured KV bytes of every cell are recorded.

A press needs its own prefill (its hooks see the hidden states), so it cannot branch from a shared prefill: sweeps
run its cells one by one. kvpress is an optional extra (``pip install 'snapeval[kvpress]'``).
"""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

from snapeval.cache.attention import check_architecture
from snapeval.cache.config import MAX_BUDGET, MIN_BUDGET, MethodConfig, PrefillWork, check_lengths
from snapeval.cache.full import FullCache
from snapeval.errors import SnapevalError

PREFIX = "kvpress"
#: Arguments snapeval sets itself (from the budget), never taken from the user.
RESERVED_ARGS = ("compression_ratio",)
#: Presses that wrap another press or need extra inputs snapeval does not give (a question, a trained model).
UNSUPPORTED = ("ComposedPress", "KeyRerotationPress", "PerLayerCompressionPress", "ChunkPress", "AdaKVPress",
               "CriticalAdaKVPress", "CriticalKVPress", "PrefillDecodingPress", "DecodingPress", "FinchPress",
               "DMSPress", "KVzapPress", "QFilterPress", "ThinKPress", "DuoAttentionPress", "KVzipPress",
               "FastKVzipPress", "ExpectedAttentionStatsPress", "BlockPress", "CompressionRatioDecodingPress",
               "ObservedAttentionPress")  # the last needs eager attention weights

#: Presses that choose tokens by position only (no score computed).
POSITIONAL_PRESSES = ("StreamingLLMPress",)
#: Presses that score with the attention of the last prompt query alone.
LAST_QUERY_PRESSES = ("TOVAPress",)


def _kvpress():
    try:
        return importlib.import_module("kvpress")
    except ImportError:
        raise SnapevalError("kvpress is not installed: pip install 'snapeval[kvpress]' (methods kvpress:<Press>)") from None


def press_names() -> list[str]:
    """The presses usable as ``kvpress:<Name>``: kvpress's scorer presses with a ``compression_ratio``."""
    module = _kvpress()
    out = []
    for name in sorted(getattr(module, "__all__", dir(module))):
        cls = getattr(module, name, None)
        if (isinstance(cls, type) and name.endswith("Press") and name not in UNSUPPORTED and dataclasses.is_dataclass(cls)
                and "compression_ratio" in {f.name for f in dataclasses.fields(cls)}):
            out.append(name)
    return out


def press_class(name: str) -> type:
    allowed = press_names()
    if name not in allowed:
        raise SnapevalError(f"method='{PREFIX}:{name}' is not allowed; kvpress presses: {', '.join(allowed)}")
    return getattr(_kvpress(), name)


@dataclass(frozen=True)
class KVPressConfig(MethodConfig):
    """A kvpress press at ``budget`` tokens per layer and KV head: ``KVPressConfig("kvpress:SnapKVPress", 256,
    (("window_size", 32),))``. ``press_args`` are the press's dataclass fields (sorted ``(name, value)`` pairs)."""

    method: str  # type: ignore[misc]  (a field here: one class serves every press)
    budget: int
    press_args: tuple[tuple[str, Any], ...] = ()
    SPLIT_FIELDS: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not self.method.startswith(PREFIX + ":"):
            raise ValueError(f"KVPressConfig.method={self.method!r} is invalid; allowed: '{PREFIX}:<PressName>'")
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or not MIN_BUDGET <= self.budget <= MAX_BUDGET:
            raise ValueError(f"KVPressConfig.budget={self.budget!r} is invalid; allowed: {MIN_BUDGET}..{MAX_BUDGET}")

    @property
    def press_name(self) -> str:
        return self.method.split(":", 1)[1]

    @classmethod
    def from_method_name(cls, method: str, budget: int | None, **press_args) -> "KVPressConfig":
        """Validate the press name and its arguments against kvpress (one-line errors naming the allowed ones)."""
        if budget is None:
            raise ValueError(f"method={method!r} needs a budget (an integer >= {MIN_BUDGET})")
        press = press_class(method.split(":", 1)[1])
        fields = {f.name: f for f in dataclasses.fields(press)}
        allowed = sorted(set(fields) - set(RESERVED_ARGS))
        for name, value in press_args.items():
            if name not in allowed:
                raise ValueError(f"{method} takes no argument {name!r}; allowed: {', '.join(allowed) or 'none'}")
            default = fields[name].default
            if default is not dataclasses.MISSING and default is not None and not isinstance(value, type(default)):
                if not (isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool)):
                    raise ValueError(f"{method}.{name}={value!r} is invalid; allowed: a {type(default).__name__} "
                                     f"(default {default!r})")
        return cls(method=method, budget=budget, press_args=tuple(sorted(press_args.items())))

    def identity(self) -> dict[str, Any]:
        return {"method": self.method, "budget": self.budget, **dict(self.press_args)}

    def prefill_work(self, prompt: int) -> PrefillWork:
        """A prompt longer than the budget: the press scores every prompt token from the layer's hidden states
        (recomputing queries or statistics), over a window of its last queries when it has a ``window_size``
        (SnapKVPress; TOVAPress reads the last query), or by position alone (StreamingLLMPress), then keeps
        ``budget`` tokens with one index list (kvpress gathers the kept indices in one pass). What each press reads is
        its own code's business; this is the shape of its work."""
        check_lengths(prompt, 0)
        if prompt <= self.budget:
            return PrefillWork()
        if self.press_name in POSITIONAL_PRESSES:
            return PrefillWork(gathered_tokens=self.budget, gathered_segments=1)
        press = press_class(self.press_name)(**dict(self.press_args))
        window = int(getattr(press, "window_size", 1 if self.press_name in LAST_QUERY_PRESSES else 0) or 0)
        return PrefillWork(window_queries=min(window, prompt), scored_tokens=prompt,
                           score_inputs=("hidden_states",), gathered_tokens=self.budget, gathered_segments=1)

    def make_press(self, prompt_length: int):
        """The press for one prompt of ``prompt_length`` tokens, set to keep ``budget`` of them."""
        ratio = 0.0
        if prompt_length > self.budget:
            ratio = (prompt_length - self.budget - 0.5) / prompt_length  # int(k_len * (1 - ratio)) == budget
        press = press_class(self.press_name)(**dict(self.press_args))
        press.compression_ratio = ratio
        return press


class KVPressCache(FullCache):
    """A ``DynamicCache`` whose prefill (:meth:`prefill`) runs under the configuration's press."""

    def __init__(self, model, config: KVPressConfig):
        check_architecture(model)
        super().__init__(model, config)

    def prefill(self, model, input_ids):
        """Prefill ``input_ids`` ``[1, L]`` through this cache under the press; returns the last logits ``[V]``."""
        press = self.method_config.make_press(input_ids.shape[1])
        with press(model):
            return model(input_ids=input_ids, past_key_values=self, use_cache=True, logits_to_keep=1).logits[0, -1]


def resolve_family(name: str):
    """The method-table row of ``kvpress:<Name>`` (checked against kvpress when the configuration is built)."""
    from snapeval.cache.methods import MethodInfo

    return MethodInfo(name, "snapeval.cache.kvpress:KVPressConfig", "snapeval.cache.kvpress:KVPressCache",
                      branches=False, summary="a kvpress press at the end of prefill; grows in decode")
