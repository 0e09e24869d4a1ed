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
"""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from snapeval.cache.attention import check_architecture
from snapeval.cache.base import CompressedKVCache
from snapeval.cache.config import MAX_BUDGET, MIN_BUDGET, MethodConfig, PrefillWork, check_lengths
from snapeval.cache.full import FullCache
from snapeval.cache.snapkv import SnapKVLayer
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
#: Presses whose score reads the compression ratio (kvpress's code): in a shared prefill each budget scores anew.
RATIO_SCORED = ("StreamingLLMPress", "CompactorPress")


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


def branch_refusal(press_name: str) -> str | None:
    """Why ``kvpress:<press_name>`` cannot branch from a shared prefill, or None when it can: a press branches when it
    compresses through kvpress's own forward hook (``BasePress.forward_hook``), which hands it one layer's prefill
    inputs and nothing else."""
    from kvpress.presses.base_press import BasePress

    cls = press_class(press_name)
    if cls.__call__ is not BasePress.__call__:
        return (f"kvpress:{press_name} installs its own hooks on the model (it overrides BasePress.__call__), so it "
                "needs its own prefill")
    if cls.forward_hook is not BasePress.forward_hook:
        return (f"kvpress:{press_name} compresses in its own forward hook (it reads or rewrites the cache object), so "
                "it needs its own prefill")
    return None


def keeps_budget_per_layer(press_name: str) -> bool:
    """Whether the press keeps exactly its ``budget`` in every layer (kvpress's ``ScorerPress.compress``): such a
    press decodes in static engine rows of the kept prompt plus the tokens to decode."""
    from kvpress.presses.scorer_press import ScorerPress

    cls = press_class(press_name)
    return issubclass(cls, ScorerPress) and cls.compress is ScorerPress.compress


def _language_model(model):
    inner = model.model
    return inner.language_model if hasattr(inner, "language_model") else inner


class PressBranch:
    """One press's branch of one shared prefill: per layer its compressed keys and values ``[1, Hkv, n, D]`` and the
    prompt positions they came from ``[1, Hkv, n]`` (None where the press does not say, such as PyramidKV)."""

    def __init__(self, config: "KVPressConfig", prompt_length: int):
        self.config, self.prompt_length = config, prompt_length
        self.layers: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []

    def cache(self, model, cache_class=None):
        """A fresh one-row cache of the compressed prompt: a :class:`KVPressCache` (decoded alone, or scored), or,
        with ``cache_class`` :class:`KVPressRows`, a row the engine loads into its static rows."""
        if cache_class is not None and issubclass(cache_class, KVPressRows):
            rows = cache_class(model, self.config)
            rows.load_kept(self.layers, self.prompt_length)
            return rows
        cache = KVPressCache(model, self.config)
        for index, (keys, values, _) in enumerate(self.layers):
            cache.update(keys, values, index)
        return cache

    def kv_bytes(self) -> int:
        return sum(k.nbytes + v.nbytes + (0 if p is None else p.nbytes) for k, v, p in self.layers)


class PressBranches:
    """The branching presses of a group during one shared prefill: ``with PressBranches(model, configs, prompt_length,
    capture) as hooks: model(...)``; then ``hooks.branches`` maps each configuration to its :class:`PressBranch`.

    Each attention layer gets one forward hook (as kvpress's own ``BasePress.__call__`` installs, with the same
    model set-up: ``post_init_from_model`` and the layer's ``rotary_emb``). After the layer's attention, the hook
    reads its prompt keys and values from the capture and calls every press's own ``compress`` with the layer's
    inputs; presses of one family (name and arguments) at several budgets share one score per layer unless their
    score reads the ratio. ``release``: drop each capture layer once the presses compressed it (nothing else of the
    group is built from the capture)."""

    def __init__(self, model, configs, prompt_length: int, capture, *, release: bool = False):
        for config in configs:
            reason = branch_refusal(config.press_name)
            if reason is not None:
                raise SnapevalError(f"method={config.method!r} cannot branch from a shared prefill: {reason}")
        self.model, self.capture, self.release = model, capture, release
        self.presses = {config: config.make_press(prompt_length) for config in configs}
        self.branches = {config: PressBranch(config, prompt_length) for config in configs}
        self.families: dict[tuple, list] = {}
        for config in configs:
            self.families.setdefault((config.press_name, config.press_args), []).append(config)
        self._hooks: list = []

    def __enter__(self) -> "PressBranches":
        language_model = _language_model(self.model)
        for press in self.presses.values():
            press.post_init_from_model(self.model)
        for layer in language_model.layers:
            layer.self_attn.rotary_emb = language_model.rotary_emb
            self._hooks.append(layer.self_attn.register_forward_hook(self._compress, with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def _compress(self, module, args, kwargs, output):
        from kvpress.utils import compute_n_kept

        index = module.layer_idx
        hidden_states = kwargs["hidden_states"]
        prompt = self.capture.layer_prompt(index, hidden_states.device)
        keys, values, attentions = prompt.keys, prompt.values, output[1]
        for (name, _), configs in self.families.items():
            shared: dict[str, torch.Tensor] = {}
            for config in configs:
                press = self.presses[config]
                scored: dict[str, torch.Tensor] = shared if name not in RATIO_SCORED else {}

                def score(*inputs, press=press, scored=scored):
                    if "scores" not in scored:
                        scored["scores"] = type(press).score(press, *inputs)
                    return scored["scores"]

                press.score = score  # an instance attribute: this prompt's press object only
                kept_keys, kept_values = press.compress(module, hidden_states, keys, values, attentions, kwargs)
                positions = None
                if press.compression_ratio == 0:  # the prompt fits: kept whole, in order
                    positions = torch.arange(keys.shape[2], device=keys.device).expand(*keys.shape[:3])
                elif keeps_budget_per_layer(name) and "scores" in scored:  # ScorerPress.compress: top-k of the scores
                    n_kept = compute_n_kept(keys.shape[2], press.compression_ratio)
                    positions = scored["scores"].topk(n_kept, dim=-1).indices
                self.branches[config].layers.append((kept_keys, kept_values, positions))
        if self.release:
            self.capture.release(index)
        return output


class PressRowsLayer(SnapKVLayer):
    """A press's branch in static rows: its kept tokens, then decoded tokens in the next free slot (as SnapKV's)."""

    def select(self, prompt):
        raise SnapevalError(f"method={self.config.method!r}: a press compresses inside its own prefill hooks; its "
                            "static rows are loaded from a shared prefill's branch (snapeval.branching), not prefilled")


class KVPressRows(CompressedKVCache):
    """A press's cache in the engine's static-row layout (``budget`` kept tokens per layer and KV head, growing
    into the slots allocated for the tokens to decode). Filled from a :class:`PressBranch` only."""

    layer_class = PressRowsLayer
    config_class = KVPressConfig

    def load_kept(self, layers, prompt_length: int) -> None:
        """One row from a branch's per-layer kept keys, values and positions (positions in slot order when the
        press does not say which prompt tokens it kept: they only mark the slots valid)."""
        for layer, (keys, values, positions) in zip(self.layers, layers):
            if positions is None:
                positions = torch.arange(keys.shape[2], device=keys.device).expand(*keys.shape[:3])
            layer.lazy_initialization(keys, values)
            layer.keys, layer.values, layer.positions = keys, values, positions.to(torch.long)
            layer.next_position = torch.full((1,), prompt_length, dtype=torch.long, device=keys.device)
            layer.fill = torch.full((1,), keys.shape[2], dtype=torch.long, device=keys.device)
            layer.seen = prompt_length


def resolve_family(name: str):
    """The method-table row of ``kvpress:<Name>`` (checked against kvpress when the configuration is built): it
    branches from a shared prefill unless :func:`branch_refusal` says why not, and decodes in static rows when it
    keeps its budget in every layer."""
    from snapeval.cache.methods import MethodInfo

    press = name.split(":", 1)[1]
    rows = "snapeval.cache.kvpress:KVPressRows" if keeps_budget_per_layer(press) else ""
    return MethodInfo(name, "snapeval.cache.kvpress:KVPressConfig", "snapeval.cache.kvpress:KVPressCache",
                      branches=branch_refusal(press) is None, prefill_hooks=True, static_cache=rows,
                      summary="a kvpress press at the end of prefill; grows in decode")
