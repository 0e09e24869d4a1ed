"""NVIDIA kvpress's presses as methods of the table: ``method=kvpress:<PressName>`` with the press's own arguments.

The budget means what it means for every other method: tokens kept per layer and KV head at the end of prefill. It
is turned into kvpress's ``compression_ratio`` per prompt (``1 - budget / prompt_length``, nudged by half a token so
that kvpress's ``int(k_len * (1 - ratio))`` keeps exactly ``budget``); prompts that fit are not compressed. Presses
compress during the prefill only (kvpress's hooks on the attention layers), so the cache then grows by one slot per
decoded token, like ``snapkv``: :class:`KVPressCache` is a :class:`~snapeval.cache.full.FullCache` (Hugging Face
``DynamicCache``) whose prefill runs under the press, and decoding uses explicit positions (the compressed cache is
shorter than the sequence). Presses that keep a different number of tokens per head or per layer (AdaKV,
PyramidKV, DuoAttention, ...) keep ``budget`` on average; the measured KV bytes of every cell are recorded.

Branching. A press compresses one layer at a time from that layer's prefill inputs (hidden states, keys, values; the
attention weights, which SDPA does not return, are None for every supported press). In a shared prefill
(:mod:`snapeval.branching`) :class:`PressBranches` hooks every attention layer once and hands each layer's inputs to
every press of the group; each press keeps its compressed keys and values as its branch (:class:`PressBranch`).
Presses of one name and arguments at several budgets compute their scores once per layer and select every budget
from them, unless their score reads the compression ratio (:data:`RATIO_SCORED`). A press that keeps exactly
``budget`` tokens per layer (kvpress's ``ScorerPress.compress``) decodes in static engine rows (:class:`KVPressRows`,
loaded from its branch only); the others (PyramidKV's per-layer budgets) decode alone. A press that registers its own
hooks or compresses in its own forward hook (it reads or rewrites the cache object) cannot branch
(:func:`branch_refusal` says why) and keeps its own prefill. A press alone in a group prefills through kvpress's own
hooks (``KVPressCache.prefill``: the reference path). kvpress is an optional extra (``pip install
'snapeval[kvpress]'``).

The press classes are read from kvpress's source (:mod:`snapeval.cache.press_spec`) to validate a press and its
arguments, and to answer whether it branches and keeps its budget per layer, without importing kvpress (seconds);
kvpress itself is imported when a press is built, and the caches (:mod:`snapeval.cache.kvpress_cache`, torch) when
one runs.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

from snapeval.cache.config import MAX_BUDGET, MIN_BUDGET, MethodConfig, PrefillWork, check_lengths
from snapeval.cache.press_spec import PREFIX, RESERVED_ARGS, UNSUPPORTED, check_press_args, press_names, press_spec
from snapeval.errors import SnapevalError, is_int

__all__ = ["PREFIX", "RESERVED_ARGS", "UNSUPPORTED", "KVPressConfig", "branch_refusal", "keeps_budget_per_layer",
           "press_class", "press_names", "resolve_family"]

#: Presses that choose tokens by position only (no score computed).
POSITIONAL_PRESSES = ("StreamingLLMPress",)
#: Presses that score with the attention of the last prompt query alone.
LAST_QUERY_PRESSES = ("TOVAPress",)
#: Presses whose score reads the compression ratio (kvpress's code): in a shared prefill each budget scores anew.
RATIO_SCORED = ("StreamingLLMPress", "CompactorPress")


def _kvpress():
    try:
        return importlib.import_module("kvpress")
    except ImportError:
        raise SnapevalError("kvpress is not installed: pip install 'snapeval[kvpress]' (methods kvpress:<Press>)") from None


def press_class(name: str) -> type:
    """The press class ``kvpress:<name>`` (imports kvpress; the name is checked first, from the source)."""
    press_spec(name)
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
        if not is_int(self.budget) or not MIN_BUDGET <= self.budget <= MAX_BUDGET:
            raise ValueError(f"KVPressConfig.budget={self.budget!r} is invalid; allowed: {MIN_BUDGET}..{MAX_BUDGET}")

    @property
    def press_name(self) -> str:
        return self.method.split(":", 1)[1]

    @classmethod
    def from_method_name(cls, method: str, budget: int | None, **press_args) -> "KVPressConfig":
        """Validate the press name and its arguments against the press's own fields, read from kvpress's source
        without importing it (:mod:`snapeval.cache.press_spec`: one-line errors naming the allowed values)."""
        if budget is None:
            raise ValueError(f"method={method!r} needs a budget (an integer >= {MIN_BUDGET})")
        press_args = check_press_args(method, press_args)
        return cls(method=method, budget=budget, press_args=tuple(sorted(press_args.items())))

    def check_context(self, context: int) -> None:
        """Arguments the press needs prompts to exceed (its window) must be below the model's ``context``."""
        check_press_args(self.method, dict(self.press_args), context=context)

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


def branch_refusal(press_name: str) -> str | None:
    """Why ``kvpress:<press_name>`` cannot branch from a shared prefill, or None when it can: a press branches when it
    compresses through kvpress's own forward hook (``BasePress.forward_hook``), which hands it one layer's prefill
    inputs and nothing else."""
    spec = press_spec(press_name)
    if spec.overrides_call:
        return (f"kvpress:{press_name} installs its own hooks on the model (it overrides BasePress.__call__), so it "
                "needs its own prefill")
    if spec.overrides_forward_hook:
        return (f"kvpress:{press_name} compresses in its own forward hook (it reads or rewrites the cache object), so "
                "it needs its own prefill")
    return None


def keeps_budget_per_layer(press_name: str) -> bool:
    """Whether the press keeps exactly its ``budget`` in every layer (kvpress's ``ScorerPress.compress``): such a
    press decodes in static engine rows of the kept prompt plus the tokens to decode."""
    return press_spec(press_name).scorer_compress


def resolve_family(name: str):
    """The method-table row of ``kvpress:<Name>`` (checked against the press's source when the configuration is
    built): it branches from a shared prefill unless :func:`branch_refusal` says why not, and decodes in static rows
    when it keeps its budget in every layer."""
    from snapeval.cache.methods import MethodInfo

    press = name.split(":", 1)[1]
    rows = "snapeval.cache.kvpress_cache:KVPressRows" if keeps_budget_per_layer(press) else ""
    return MethodInfo(name, "snapeval.cache.kvpress:KVPressConfig", "snapeval.cache.kvpress_cache:KVPressCache",
                      branches=branch_refusal(press) is None, static_cache=rows,
                      prefill_hook="snapeval.cache.kvpress_cache:PressBranches",
                      summary="a kvpress press at the end of prefill; grows in decode")

