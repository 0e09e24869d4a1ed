"""The resolved configuration of every method, validated once, on construction.

A configuration object is what travels, unchanged, from a sweep (or the CLI, or the Python API) to the cache that
implements it: it knows its method (``config.method``), its total budget (``config.budget``, ``None`` for the full
cache) and its identity (``config.identity()``, the dict hashed into a sweep cell's id). Build one from a method name
and a budget with :func:`snapeval.cache.resolve_method`, or directly.

Paper names (arXiv 2511.03092) -> field: ``sink_token_length`` -> ``sink``, ``recent_token_length`` -> ``recent``,
``topk_length`` -> ``topk``, ``snapkv_observation_length`` -> ``observation``, ``snapkv_kernel_size`` ->
``pool_kernel`` (stored as ``kernel``: see :attr:`Setting.stored`).
The paper does not publish how it divides the budget; the defaults below come from the reference code of the methods it combines
(StreamingLLM: 4 sinks; SnapKV: observation window 32, average pooling with kernel 5, as in its released code).
"""
from __future__ import annotations

import dataclasses
import functools
import warnings
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Mapping

from snapeval.errors import SnapevalError, check_int, is_int

POOLINGS = ("avg", "max")

#: Defaults used by the ``from_budget`` constructors (and documented in the README).
DEFAULT_SINK = 4
DEFAULT_OBSERVATION = 32
DEFAULT_KERNEL = 5
DEFAULT_POOLING = "avg"
DEFAULT_RECENT_FRACTION = 0.5
#: The smallest budget any compressed method accepts (a sink or window token plus one more).
MIN_BUDGET = 2
#: The largest: 2M tokens per layer and KV head, beyond every supported model's context (a sweep also checks a
#: preset's own context length before anything runs).
MAX_BUDGET = 1 << 21

#: The key of a configuration field's :class:`Setting` in the field's metadata.
SETTING = "snapeval.setting"


@dataclass(frozen=True)
class Setting:
    """One setting of a method, declared once, as the metadata of its configuration's dataclass field
    (:func:`setting`), and read from there by everything that takes it from a user: the ``snapeval run --NAME`` flag,
    the key of a sweep's method entry, the lm-eval model_arg, the results table's column and the cells ``snapeval
    regress`` matches; every one of them checks a value with :meth:`check` (one line: field, value, allowed values).

    Attributes:
        help: what it sets, one line (``--help``, the docs).
        type: the Python type of its value, ``int`` or ``str`` (a command line's text is parsed to it).
        minimum: the smallest integer allowed (None: no bound).
        choices: the allowed strings (empty: any).
        odd: an odd integer only.
        fraction: besides a number of tokens, a fraction of the budget in (0, 1] (a float) may be given; the
            configuration stores the tokens.
        default_text: what ``from_budget`` takes when it is left out, in words.
        stored: the key its value is stored under where it differs from its name: in a configuration's identity
            (hashed into cell ids), a results table's column, a cell view, the name of a ``snapeval run`` output;
            and the old spelling a user may still write on every surface (warned once, :meth:`MethodConfig.typed`).
            ``pool_kernel`` is stored as ``kernel``, its name before it said which kernel, so that every cell id
            and committed result stays the same. Empty when declared: the name (filled in by
            :meth:`MethodConfig.settings`).
        name: the field's name (filled in by :meth:`MethodConfig.settings`).
        default: the field's default (filled in by :meth:`MethodConfig.settings`).
    """

    help: str
    type: type = int
    minimum: int | None = None
    choices: tuple[str, ...] = ()
    odd: bool = False
    fraction: bool = False
    default_text: str = ""
    stored: str = ""
    name: str = ""
    default: Any = None

    def allowed(self, *, resolved: bool = False) -> str:
        """The allowed values in words (``resolved``: as a configuration stores it, so tokens only)."""
        if self.choices:
            return ", ".join(self.choices)
        if self.odd:
            return "a positive odd integer"
        tokens = "an integer" if self.minimum is None else f"an integer >= {self.minimum}"
        if self.fraction and not resolved:
            return f"{tokens} (tokens) or a fraction of the budget in (0, 1]"
        return tokens

    def check(self, value: Any, owner: str = "", *, resolved: bool = False) -> Any:
        """``value`` if it is allowed, else a one-line ``ValueError`` naming ``owner.name``, the value and
        :meth:`allowed`."""
        if self._ok(value, resolved):
            return value
        where = f"{owner}.{self.name}" if owner else self.name
        raise ValueError(f"{where}={value!r} is invalid; allowed: {self.allowed(resolved=resolved)}")

    def in_tokens(self, value: Any, budget: int, owner: str = "") -> int:
        """``value`` checked and, for a fraction of the budget (a float, when :attr:`fraction`), the tokens it stands
        for at ``budget`` (rounded, at least one): what a configuration stores."""
        value = self.check(value, owner)
        return max(1, int(round(budget * value))) if isinstance(value, float) else value

    def _ok(self, value: Any, resolved: bool) -> bool:
        if self.type is str:
            return isinstance(value, str) and (not self.choices or value in self.choices)
        if self.fraction and not resolved and isinstance(value, float):
            return 0.0 < value <= 1.0
        if not is_int(value):
            return False
        if self.odd:
            return value >= 1 and value % 2 == 1
        return self.minimum is None or value >= self.minimum

    def parse(self, text: Any, owner: str = "") -> Any:
        """A value given as text (a command-line flag, an lm-eval model_arg) as the declared type, checked; any other
        value is only checked."""
        if not isinstance(text, str) or self.type is str:
            return self.check(text, owner)
        try:
            value: Any = int(text)
        except ValueError:
            try:
                value = float(text) if self.fraction else text
            except ValueError:
                value = text
        return self.check(value, owner)


def setting(default: Any, help: str, **declaration) -> Any:
    """A configuration field that users set: ``sink: int = setting(4, "attention sinks", minimum=0)`` (the
    arguments of :class:`Setting`)."""
    return dataclasses.field(default=default, metadata={SETTING: Setting(help=help, **declaration)})


def accepts_old_names(cls):
    """Class decorator (above ``@dataclass``) of a configuration with a setting stored under another key than its
    name (:attr:`Setting.stored`): its constructor and ``from_budget`` also take the old spelling
    (:meth:`MethodConfig.typed`: one ``DeprecationWarning`` line naming both keys; :func:`dataclasses.replace`, which
    passes every field by its name, takes the name only)."""
    init, from_budget = cls.__init__, cls.__dict__.get("from_budget")

    @functools.wraps(init)
    def __init__(self, *args, **settings):
        init(self, *args, **cls.typed(settings))

    cls.__init__ = __init__
    if from_budget is not None:
        function = from_budget.__func__

        @functools.wraps(function)
        def typed_from_budget(owner, *args, **settings):
            return function(owner, *args, **owner.typed(settings))

        cls.from_budget = classmethod(typed_from_budget)
    return cls


def _require_int(field: str, value, minimum: int, owner: str) -> None:
    check_int(f"{owner}.{field}", value, minimum, error=ValueError)


def check_budget(budget, owner_class) -> None:
    """A one-line ``ValueError`` unless ``budget`` is an integer in ``MIN_BUDGET..MAX_BUDGET`` (naming
    ``owner_class``, a configuration class with a ``method``): what every budgeted method's ``from_budget`` checks
    first."""
    if budget is None:
        raise ValueError(f"method={owner_class.method!r} needs a budget (an integer >= {MIN_BUDGET})")
    _require_int("budget", budget, MIN_BUDGET, owner_class.__name__)
    if budget > MAX_BUDGET:
        raise ValueError(f"{owner_class.__name__}.budget={budget} is invalid; allowed: {MIN_BUDGET}..{MAX_BUDGET}")


def _default_sink(budget: int, sink: int | None, owner: str) -> int:
    """An explicit ``sink`` must leave room for one more slot; the default (4) shrinks to fit tiny budgets."""
    if sink is None:
        return min(DEFAULT_SINK, budget - 1)
    _require_int("sink", sink, 0, owner)
    if sink >= budget:
        raise ValueError(f"{owner}.sink={sink} is invalid with budget={budget}; allowed: 0..{budget - 1}")
    return sink


class _SettingNames:
    """``Config.SPLIT_FIELDS``: the names of :meth:`MethodConfig.settings` (kept for the callers that read it)."""

    def __get__(self, instance, owner) -> tuple[str, ...]:
        return tuple(s.name for s in owner.settings())


#: What a method's scoring may read besides the layer's keys and values (:attr:`PrefillWork.score_inputs`).
SCORE_INPUTS = ("queries", "hidden_states", "attention_weights")


@dataclass(frozen=True)
class PrefillWork:
    """What a method computes at the end of one prefill beyond ordinary full attention, per layer and KV head: what
    the simulator prices and the memory plan sizes (vLLM's ``KVCacheSpec`` answers memory the same way, per layer).
    ``PrefillWork()`` (all zero) means nothing: the prompt is the cache.

    Attributes:
        window_queries: last prompt queries whose attention over the whole prompt is computed again to score the
            tokens (SnapKV's observation window; 0: no attention-based scoring).
        scored_tokens: prompt tokens given a score and ranked (pooling and top-k over them; 0: a positional choice).
        score_inputs: what the scoring reads beyond the layer's keys and values: ``"queries"`` (the window's
            queries, kept by the prefill), ``"hidden_states"`` (a press recomputing queries or statistics),
            ``"attention_weights"`` (materialised attention).
        gathered_tokens: tokens copied into the compressed cache (0: nothing moves).
        gathered_segments: contiguous pieces the kept tokens are gathered from and laid out as (SnapStream's
            ``[sink | ring | top-k]``: 3, concatenated into one slot; one index list: 1). Each piece is one gather
            kernel and more than one needs a concatenation: the simulator prices a kernel's fixed cost per piece.
    """

    window_queries: int = 0
    scored_tokens: int = 0
    score_inputs: tuple[str, ...] = ()
    gathered_tokens: int = 0
    gathered_segments: int = 0

    def __post_init__(self) -> None:
        for name in ("window_queries", "scored_tokens", "gathered_tokens", "gathered_segments"):
            value = getattr(self, name)
            check_int(f"PrefillWork.{name}", value, 0, error=ValueError)
        unknown = sorted(set(self.score_inputs) - set(SCORE_INPUTS))
        if unknown:
            raise ValueError(f"PrefillWork.score_inputs has {unknown[0]!r}; allowed: {', '.join(SCORE_INPUTS)}")
        if bool(self.gathered_tokens) != bool(self.gathered_segments):
            raise ValueError(f"PrefillWork.gathered_segments={self.gathered_segments} is invalid with "
                             f"gathered_tokens={self.gathered_tokens}; allowed: both 0 or both > 0")

    @property
    def none(self) -> bool:
        return not (self.window_queries or self.scored_tokens or self.gathered_tokens)


def check_lengths(prompt, generated) -> None:
    """A one-line ``ValueError`` unless ``prompt`` and ``generated`` are token counts (integers >= 0)."""
    for name, value in (("prompt", prompt), ("generated", generated)):
        check_int(name, value, 0, error=ValueError)


class MethodConfig:
    """What every method's configuration offers (a mixin of the frozen dataclasses below).

    Its settings are its dataclass fields declared with :func:`setting` (:meth:`settings`): what a user may set, with
    their types, defaults, allowed values and help, read by the CLI, the sweep, the lm-eval model, the results table
    and ``regress``. Besides its identity, a configuration describes what its cache holds and costs, so that the
    simulator, the memory plan and the report read the method instead of a list of names: :meth:`kept_tokens`
    (tokens held per layer and KV head at any point of a request), :meth:`cache_slots` (what a static-row allocation
    reserves) and :meth:`prefill_work` (the compression's own work at the end of prefill).

    A subclass is a frozen dataclass with a ``method`` name, a ``budget`` (a field or a property), its settings and a
    ``from_budget(budget, **settings)`` constructor; its ``__post_init__`` calls :meth:`check_settings` and then
    checks what ties settings together.
    """

    method: ClassVar[str]
    #: The names of :meth:`settings` (deprecated: read :meth:`settings`).
    SPLIT_FIELDS: ClassVar[tuple[str, ...]] = _SettingNames()  # type: ignore[assignment]
    #: The cache never grows while decoding: its rows have ``budget`` slots (a ring takes every decoded token).
    FIXED_SIZE: ClassVar[bool] = False

    budget: Any  # a property or a field of every subclass: total slots per layer and KV head (None: unbounded)

    @classmethod
    def settings(cls) -> tuple[Setting, ...]:
        """The method's settings, in field order: every dataclass field declared with :func:`setting`."""
        return tuple(dataclasses.replace(f.metadata[SETTING], name=f.name, default=f.default,
                                         stored=f.metadata[SETTING].stored or f.name)
                     for f in dataclasses.fields(cls) if SETTING in f.metadata)

    @classmethod
    def old_names(cls) -> dict[str, str]:
        """``{stored name: name}`` of the settings stored under another key than their name (:attr:`Setting.stored`):
        the old spellings a user may still write."""
        return {s.stored: s.name for s in cls.settings() if s.stored != s.name}

    @classmethod
    def typed(cls, given: Mapping[str, Any], *, warn: bool = True, where: str = "") -> dict[str, Any]:
        """``given`` settings with each old spelling (:meth:`old_names`) replaced by its name, in place: one
        ``DeprecationWarning`` line naming both keys per old spelling (``warn``: a user wrote it; not for keys read
        back from a stored identity or view); both spellings given is a one-line :class:`SnapevalError`. ``where``:
        the surface's prefix in the messages (``"--method-arg "``, ``"methods[0]."``).

        The one entry point of the old spellings: every surface a user sets a method's settings on calls it before
        its own checks (the constructor and ``from_budget`` through :func:`accepts_old_names`,
        :func:`~snapeval.cache.resolve_method`, ``--method-arg`` and lm-eval's model_args through
        :func:`~snapeval.cache.methods.settings_from_text`, a sweep's method entries, ``snapeval simulate``), and so
        does a stored identity read back (``warn=False``); a family's method (``kvpress:<Press>``) declares no old
        spelling, so its arguments pass unchanged."""
        old = cls.old_names()
        out: dict[str, Any] = {}
        for key, value in given.items():
            name = old.get(key, key)
            if name != key:
                if name in given:
                    raise SnapevalError(f"{where}{key} and {where}{name} are the same setting of {cls.__name__} "
                                        f"(its old and its new name); allowed: {name} alone")
                if warn:
                    warnings.warn(f"{where}{key} is deprecated; use {where}{name} (the same setting of {cls.__name__}, "
                                  f"still stored as {key!r})", DeprecationWarning, stacklevel=3)
            out[name] = value
        return out

    @classmethod
    def stored_keys(cls, settings: Mapping[str, Any]) -> dict[str, Any]:
        """``settings`` by the keys they are stored under (:attr:`Setting.stored`); other keys unchanged."""
        stored = {s.name: s.stored for s in cls.settings()}
        return {stored.get(k, k): v for k, v in settings.items()}

    def stored_value(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key`` (a results table's setting column): the setting stored under it, else the
        attribute of that name, else ``default``."""
        return getattr(self, self.old_names().get(key, key), default)

    def __getattr__(self, name: str) -> Any:
        """A setting read by its old name (:meth:`old_names`): its value, with a ``DeprecationWarning``."""
        if name.startswith("__") or name not in type(self).old_names():
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        new = type(self).old_names()[name]
        warnings.warn(f"{type(self).__name__}.{name} is deprecated; read .{new} (the same setting)",
                      DeprecationWarning, stacklevel=2)
        return getattr(self, new)

    @classmethod
    def setting_named(cls, name: str) -> Setting:
        """The declaration of one setting (``KeyError`` if the method has none of that name)."""
        return {s.name: s for s in cls.settings()}[name]

    def check_settings(self) -> None:
        """Every setting's stored value, checked against its declaration (one-line ``ValueError``)."""
        for declared in self.settings():
            declared.check(getattr(self, declared.name), type(self).__name__, resolved=True)

    def kept_tokens(self, prompt: int, generated: int = 0) -> int:
        """Tokens the cache holds per layer and KV head after a ``prompt``-token prefill and ``generated`` decoded
        tokens: the whole sequence for the full cache, ``min(budget, prompt + generated)`` for a fixed-size cache,
        ``min(budget, prompt) + generated`` for one that compresses the prompt and then appends."""
        check_lengths(prompt, generated)
        if self.budget is None:
            return prompt + generated
        if self.FIXED_SIZE:
            return min(self.budget, prompt + generated)
        return min(self.budget, prompt) + generated

    def mean_kept_tokens(self, prompt: int, generated: int) -> float:
        """Mean of :meth:`kept_tokens` over the ``generated`` decode steps (each step attends to the cache as it is
        before its token is written): what a decode of that length streams on average."""
        check_lengths(prompt, generated)
        start = self.kept_tokens(prompt, 0)
        if generated == 0:
            return float(start)
        if self.FIXED_SIZE:  # grows until it holds `budget`, then stays (an arithmetic series, capped)
            growing = min(generated, self.budget - start)
            return (growing * start + growing * (growing - 1) / 2 + (generated - growing) * self.budget) / generated
        return start + (generated - 1) / 2

    def cache_slots(self, prompt: int, max_new_tokens: int) -> int:
        """Slots per layer and KV head a static-row allocation reserves for one request: ``budget`` for a
        fixed-size cache, the kept prompt plus every token to decode otherwise."""
        check_lengths(prompt, max_new_tokens)
        if self.FIXED_SIZE:
            return self.budget
        return self.kept_tokens(prompt, max_new_tokens)

    def prefill_work(self, prompt: int) -> PrefillWork:
        """The compression's work at the end of a ``prompt``-token prefill (see :class:`PrefillWork`); nothing when
        the prompt fits the budget."""
        check_lengths(prompt, 0)
        return PrefillWork()

    def window_queries(self) -> int:
        """How many of the last prompt queries its compression reads (SnapKV's observation window; 1 when it reads
        none): what a shared prefill's capture keeps (:mod:`snapeval.branching`) and the memory plan sizes."""
        return 1

    def identity(self) -> dict[str, Any]:
        """``{"method": ..., "budget": ..., <every field>}``: what makes two configurations the same experiment."""
        out = {"method": self.method, **self.stored_keys(asdict(self))}
        if self.budget is not None:
            out["budget"] = self.budget
        return out

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.identity().items() if k != "method"}

    @property
    def label(self) -> str:
        return self.method if self.budget is None else f"{self.method}@{self.budget}"


@dataclass(frozen=True)
class FullConfig(MethodConfig):
    """The uncompressed baseline: every token kept; no budget."""

    method: ClassVar[str] = "full"

    @property
    def budget(self) -> None:
        return None

    @classmethod
    def from_budget(cls, budget: int | None = None, **settings) -> "FullConfig":
        if budget is not None or settings:
            given = "budget" if budget is not None else next(iter(settings))
            raise ValueError(f"method 'full' takes no {given} (it keeps the whole cache); allowed: no budget or "
                             "settings")
        return cls()


@accepts_old_names
@dataclass(frozen=True)
class SnapStreamConfig(MethodConfig):
    """Cache layout ``[sink | ring | top-k]`` of ``budget = sink + recent + topk`` slots per layer and KV head.

    Settings (besides the budget; :meth:`from_budget` derives the ones left out):
        sink: first prompt tokens, always kept (attention sinks). ``>= 0``.
        recent: ring-buffer size: the most recent tokens, prompt tail first, then every decoded token. ``>= 1``.
        topk: middle prompt tokens kept by SnapKV selection, chosen once at the end of prefill. ``>= 0``.
        observation: number of last prompt queries that score the middle tokens. ``>= 1``; when ``topk > 0`` it
            must not exceed ``recent``, so the queries that chose the top-k stay in the cache (as SnapKV keeps its
            observation window).
        pool_kernel: width of the 1-D pooling along the key axis (stride 1, padding ``pool_kernel // 2``): a
            positive odd integer. Stored as ``kernel`` (identities, results columns), its old name, which is still
            accepted with a warning (:attr:`Setting.stored`).
        pooling: ``"avg"`` (the paper's equation and SnapKV's released code) or ``"max"``.
    """

    method: ClassVar[str] = "snapstream"
    FIXED_SIZE: ClassVar[bool] = True

    sink: int = setting(DEFAULT_SINK, "attention sinks: the first prompt tokens, always kept", minimum=0,
                        default_text=f"{DEFAULT_SINK} (fewer for a tiny budget)")
    recent: int = setting(508, "ring of the most recent tokens (prompt tail, then every decoded token)", minimum=1,
                          fraction=True, default_text="half the budget, at least the observation window")
    topk: int = setting(512, "middle prompt tokens kept by SnapKV selection at the end of prefill", minimum=0,
                        default_text="the rest of the budget (an explicit value must add up)")
    observation: int = setting(DEFAULT_OBSERVATION, "last prompt queries that score the middle tokens", minimum=1,
                               fraction=True, default_text=str(DEFAULT_OBSERVATION))
    pool_kernel: int = setting(DEFAULT_KERNEL, "pooling width over the scores along the key axis (stored as kernel)",
                               odd=True, stored="kernel", default_text=str(DEFAULT_KERNEL))
    pooling: str = setting(DEFAULT_POOLING, "pooling of the scores", type=str, choices=POOLINGS,
                           default_text=DEFAULT_POOLING)

    def __post_init__(self) -> None:
        owner = type(self).__name__
        self.check_settings()
        if self.topk > 0 and self.observation > self.recent:
            raise ValueError(
                f"{owner}.observation={self.observation} is invalid with recent={self.recent} and "
                f"topk={self.topk}; allowed: 1..{self.recent} (the observation window must fit in the ring)"
            )

    @property
    def budget(self) -> int:
        """Total cache slots per layer and KV head: ``sink + recent + topk``."""
        return self.sink + self.recent + self.topk

    def window_queries(self) -> int:
        return self.observation

    def prefill_work(self, prompt: int) -> PrefillWork:
        """A prompt longer than the budget: the last ``observation`` queries score the middle candidates (between
        the sinks and the ring; none without top-k), and ``budget`` tokens are gathered into the layout."""
        check_lengths(prompt, 0)
        if prompt <= self.budget:
            return PrefillWork()
        pieces = (self.sink > 0) + 1 + (self.topk > 0)  # [sink | ring | top-k]
        if self.topk == 0:
            return PrefillWork(gathered_tokens=self.budget, gathered_segments=pieces)
        return PrefillWork(window_queries=min(self.observation, prompt), scored_tokens=prompt - self.sink - self.recent,
                           score_inputs=("queries",), gathered_tokens=self.budget, gathered_segments=pieces)

    @classmethod
    def from_budget(
        cls,
        budget: int,
        *,
        sink: int | None = None,
        recent: int | float | None = None,
        topk: int | None = None,
        observation: int | float = DEFAULT_OBSERVATION,
        pool_kernel: int = DEFAULT_KERNEL,
        pooling: str = DEFAULT_POOLING,
        recent_fraction: float | None = None,
    ) -> "SnapStreamConfig":
        """Split a total ``budget`` into sinks, ring and top-k.

        Defaults: 4 sinks (fewer only when the budget is tiny; an explicit ``sink`` must be below the budget); a
        ring of half the budget, at least ``observation`` slots (``recent``: tokens, or a float fraction of the
        budget in (0, 1]); the rest is top-k (an explicit ``topk`` must add up). Example: budget 1024 -> sink 4,
        recent 512, topk 508. ``observation`` is tokens (default 32) or a float fraction of the budget in (0, 1]
        (``0.01``: 328 queries at budget 32768, 82 at 8192: a window that grows with the cache). Without a budget,
        ``recent`` and ``topk`` (and optionally ``sink``) give the layout directly (a fractional ``observation``
        then needs a budget). ``recent_fraction`` is the deprecated spelling of a float ``recent``.
        """
        if recent_fraction is not None:
            if recent is not None:
                raise ValueError(f"{cls.__name__}: give recent or recent_fraction, not both")
            whole = is_int(recent_fraction)
            recent = float(recent_fraction) if whole else recent_fraction
        if budget is None and isinstance(recent, int) and topk is not None:
            if isinstance(observation, float):
                raise ValueError(f"{cls.__name__}.observation={observation!r} is a fraction of the budget; without "
                                 "a budget allowed: an integer >= 1")
            return cls(sink=DEFAULT_SINK if sink is None else sink, recent=recent, topk=topk, observation=observation,
                       pool_kernel=pool_kernel, pooling=pooling)
        check_budget(budget, cls)
        observation = cls.setting_named("observation").in_tokens(observation, budget, cls.__name__)
        fraction = DEFAULT_RECENT_FRACTION
        if recent is not None:
            cls.setting_named("recent").check(recent, cls.__name__)
            if isinstance(recent, float):
                fraction, recent = recent, None
        sink = _default_sink(budget, sink, cls.__name__)
        if recent is None:
            recent = max(min(observation, budget - sink), int(round(budget * fraction)))
            recent = min(recent, budget - sink)
        left = budget - sink - recent
        if left < 0:
            raise ValueError(
                f"{cls.__name__}.recent={recent} is invalid with budget={budget} and sink={sink}; "
                f"allowed: 1..{budget - sink}"
            )
        if topk is not None and topk != left:
            raise ValueError(
                f"{cls.__name__}.topk={topk} does not add up: budget {budget} = sink {sink} + recent {recent} "
                f"+ topk {left}; allowed: {left} or leave it out"
            )
        return cls(sink=sink, recent=recent, topk=left, observation=observation, pool_kernel=pool_kernel,
                   pooling=pooling)


@dataclass(frozen=True)
class StreamingLLMConfig(MethodConfig):
    """StreamingLLM in SnapStream's fixed layout: ``[sink | ring]``, ``budget = sink + recent`` (no top-k)."""

    method: ClassVar[str] = "streamingllm"
    FIXED_SIZE: ClassVar[bool] = True
    topk: ClassVar[int] = 0  # read by the shared sink/ring layer code

    sink: int = setting(DEFAULT_SINK, "attention sinks: the first prompt tokens, always kept", minimum=0,
                        default_text=f"{DEFAULT_SINK} (fewer for a tiny budget)")
    recent: int = setting(1020, "ring of the most recent tokens (prompt tail, then every decoded token)", minimum=1,
                          default_text="the rest of the budget (an explicit value must add up)")

    def __post_init__(self) -> None:
        self.check_settings()

    @property
    def budget(self) -> int:
        return self.sink + self.recent

    def prefill_work(self, prompt: int) -> PrefillWork:
        """Positional: no scoring; the sinks and the prompt's tail are gathered into the layout."""
        check_lengths(prompt, 0)
        if prompt <= self.budget:
            return PrefillWork()
        return PrefillWork(gathered_tokens=self.budget, gathered_segments=(self.sink > 0) + 1)

    @classmethod
    def from_budget(cls, budget: int, *, sink: int | None = None, recent: int | None = None) -> "StreamingLLMConfig":
        """``budget`` slots: ``sink`` attention sinks (default 4) and a ring of ``budget - sink`` recent tokens (an
        explicit ``recent`` must add up)."""
        check_budget(budget, cls)
        sink = _default_sink(budget, sink, cls.__name__)
        if recent is not None and recent != budget - sink:
            raise ValueError(f"{cls.__name__}.recent={recent!r} does not add up: budget {budget} = sink {sink} + "
                             f"recent {budget - sink}; allowed: {budget - sink} or leave it out")
        return cls(sink=sink, recent=budget - sink)


@accepts_old_names
@dataclass(frozen=True)
class SnapKVConfig(MethodConfig):
    """``budget`` prompt tokens kept (observation window included); ``pool_kernel`` odd (stored as ``kernel``);
    ``pooling`` avg or max."""

    method: ClassVar[str] = "snapkv"

    budget: int
    observation: int = setting(DEFAULT_OBSERVATION, "last prompt queries that score the earlier tokens (always kept)",
                               minimum=1, fraction=True,
                               default_text=f"{DEFAULT_OBSERVATION}, or half a budget below {2 * DEFAULT_OBSERVATION}")
    pool_kernel: int = setting(DEFAULT_KERNEL, "pooling width over the scores along the key axis (stored as kernel)",
                               odd=True, stored="kernel", default_text=str(DEFAULT_KERNEL))
    pooling: str = setting(DEFAULT_POOLING, "pooling of the scores", type=str, choices=POOLINGS,
                           default_text=DEFAULT_POOLING)

    def __post_init__(self):
        check_budget(self.budget, type(self))  # the rule resolve_method applies (from_budget), in one place
        self.check_settings()
        if self.observation > self.budget:
            raise ValueError(
                f"SnapKVConfig.observation={self.observation} is invalid; allowed: 1..budget ({self.budget})"
            )

    def window_queries(self) -> int:
        return self.observation

    def prefill_work(self, prompt: int) -> PrefillWork:
        """A prompt longer than the budget: the last ``observation`` queries score every earlier token; ``budget``
        tokens are gathered, as two pieces (the selected tokens and the window)."""
        check_lengths(prompt, 0)
        if prompt <= self.budget:
            return PrefillWork()
        return PrefillWork(window_queries=min(self.observation, prompt), scored_tokens=prompt - self.observation,
                           score_inputs=("queries",), gathered_tokens=self.budget, gathered_segments=2)

    @classmethod
    def from_budget(cls, budget: int, *, observation: int | float | None = None,
                    pool_kernel: int = DEFAULT_KERNEL, pooling: str = DEFAULT_POOLING) -> "SnapKVConfig":
        """The observation window defaults to 32, or half the budget when the budget is under 64; it may be given
        as tokens or as a float fraction of the budget in (0, 1]."""
        check_budget(budget, cls)
        if observation is None:
            observation = min(DEFAULT_OBSERVATION, max(1, budget // 2))
        observation = cls.setting_named("observation").in_tokens(observation, budget, cls.__name__)
        return cls(budget=budget, observation=observation, pool_kernel=pool_kernel,
                   pooling=pooling)


@dataclass(frozen=True)
class SelectionConfig(MethodConfig):
    """The settings of a scored-selection method (:mod:`snapeval.cache.selection`): a ``budget`` of prompt tokens
    kept per layer and KV head, then every decoded token appended. A subclass names its ``method`` and declares its
    settings with :func:`setting`; the budget and the settings are checked here (one-line ``ValueError``)."""

    budget: int

    def __post_init__(self) -> None:
        check_budget(self.budget, type(self))
        self.check_settings()

    @classmethod
    def from_budget(cls, budget: int | None, **settings) -> "SelectionConfig":
        """``budget`` prompt tokens; a setting left out takes its declared default."""
        check_budget(budget, cls)
        return cls(budget=budget, **settings)

    def prefill_work(self, prompt: int) -> PrefillWork:
        """A prompt longer than the budget: every prompt token scored and ranked, ``budget`` tokens gathered (one
        index list)."""
        check_lengths(prompt, 0)
        if prompt <= self.budget:
            return PrefillWork()
        return PrefillWork(scored_tokens=prompt, gathered_tokens=self.budget, gathered_segments=1)


def streamingllm_config(budget: int, sink: int | None = None) -> StreamingLLMConfig:
    """``budget`` slots: ``sink`` attention sinks and a ring of ``budget - sink`` recent tokens."""
    return StreamingLLMConfig.from_budget(budget, sink=sink)
