"""The memory plan of a shared-prefill group: what it holds, per item and per row, before it runs.

A group (:class:`snapeval.branching.BranchSet`) prefills each item once and builds every configuration's cache from
that prefill. Items go through in *chunks* of ``chunk`` items:

1. **prefill** (one item at a time): the model's weights, the one-row :class:`~snapeval.cache.capture.PromptCapture`
   (every layer's prompt keys and values, the last window queries, the window attention sums), and the prefill's
   activations (the largest is a decoder layer's MLP: three ``[tokens, intermediate]`` tensors at once);
2. **branch**: right after the item's prefill, its one-row cache of every configuration that decodes in rows is
   built and *held* until the chunk decodes (fixed-size caches: ``budget`` slots; appending ones: the kept
   prompt); a configuration decoded *alone* (below) decodes this item now, from the capture, which is then freed;
3. **decode**: each configuration in turn decodes the chunk's held branches in the static rows of its own engine
   (``rows`` rows of :meth:`~snapeval.cache.config.MethodConfig.cache_slots` slots), which are freed after it.

A growing cache that holds the whole prompt (the full cache, or SnapKV with a budget of at least the prompt) decodes
in rows only while ``chunk`` of its rows hold fewer bytes than the weights (a decode step reads the weights once and
every row's keys and values once: below that point it reads more weight bytes than KV bytes, so batching pays);
beyond it, it decodes alone, item by item, straight from the capture, holding one row as the per-cell path does (the
capture's layers move into its cache one by one).
Fixed-size caches always decode in rows (``budget`` slots each, as their per-cell engine does).

Every method's memory is read from the method (:meth:`~snapeval.cache.config.MethodConfig.kept_tokens`,
:meth:`~snapeval.cache.config.MethodConfig.cache_slots`, ``FIXED_SIZE``) and the model's shape
(:class:`ModelShape`); the plan's byte counts of the capture, the branches, the rows and the weights equal the
tensors allocated (``tests/test_memory_plan.py``); activations are an estimate of the live tensors of one decoder
layer's forward.

:func:`plan_group` picks the largest chunk, at most the one asked for, whose predicted peak stays within the
device's budget (``max_memory``; default: the memory in use plus what is free, less a margin), then, if even one
item does not fit, prefills long prompts in token chunks (the capture's continuation: equal to one prefill up to
float rounding) and, on a GPU, keeps the capture in host memory (streamed back layer by layer when branches are
built). :class:`PeakMeter` measures the real peak for the cells' provenance.

On a GPU the held branches can wait in host memory instead (``branches_on_host``): each branch layer goes to the host
as soon as it is built, and each engine copies its rows back when it admits them. The device then holds no branch,
so each configuration's engine has the whole room for its rows and the chunk is bounded by the host's budget
(the model's ``max_memory`` entry for ``cpu``, else what the host has available less a margin). The plan takes it
where it leaves fewer bytes per decoded token, counting the branches' trip over the host link both ways
(:data:`HOST_LINK_BYTES_PER_S`): LongBench-v2 at 120k tokens holds 11.8 GiB of branches per item, so the device holds
2 items and each configuration decodes in rows of 2; from the host, in rows of up to the chunk.

A plan is sized for the largest item it is given. On a GPU a group therefore takes its items longest prompt first
and plans each chunk for the items left (:func:`longest_first`, :func:`chunk_order`): a chunk of shorter prompts
decodes in more rows than one plan for the whole call would give it.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Sequence

from snapeval.cache.config import MethodConfig
from snapeval.errors import SnapevalError, check_int

GIB = 1 << 30
#: Bytes of one int64 (slot positions, a row's next position and fill count).
INT64 = 8
#: Safety margin kept free when the budget is read from the device: the larger of this and a fraction of the total.
MARGIN_BYTES = 1 * GIB
MARGIN_FRACTION = 0.08
#: Smallest prefill chunk (tokens) the plan will split a long prompt into.
MIN_PREFILL_TOKENS = 512
#: Items a shared group asks to hold in flight on a GPU (the plan takes fewer when they do not fit, and never more
#: than the call has): each configuration decodes as many rows as its own bytes allow up to this, so a decode-bound
#: task (AIME, LiveCodeBench: short prompts, long generations) runs hundreds of small-budget rows, not 8. The CPU
#: asks for the run's batch size, at least 8 (its committed results).
GPU_CHUNK = 256
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20,
          "gib": 1 << 30, "tib": 1 << 40}


def parse_bytes(value, field_name: str = "max_memory") -> int:
    """``"70GiB"``, ``"64GB"``, ``"512MiB"``, ``2**30`` -> bytes (one-line error naming the field otherwise)."""
    if isinstance(value, bool):
        raise SnapevalError(f"{field_name}={value!r} is invalid; allowed: bytes as an integer or a string such as "
                            "'70GiB', '64GB', '512MiB'")
    if isinstance(value, int) and value > 0:
        return value
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", value) if isinstance(value, str) else None
    if match and match.group(2).lower() in _UNITS and float(match.group(1)) > 0:
        return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    raise SnapevalError(f"{field_name}={value!r} is invalid; allowed: bytes as an integer or a string such as "
                        "'70GiB', '64GB', '512MiB'")


def gib(value: int | float) -> float:
    return round(value / GIB, 3)


# ---------------------------------------------------------------------------------------------------------------------
# the model's shape


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs to know of a decoder (Llama, Qwen2): sizes, the cache dtype and the weights' bytes."""

    layers: int
    kv_heads: int
    q_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    dtype_bytes: int
    weight_bytes: int

    @classmethod
    def of(cls, model) -> "ModelShape":
        """The shape of a loaded model; ``weight_bytes`` is what its parameters and buffers hold."""
        cfg = model.config
        weights = sum(p.nbytes for p in model.parameters()) + sum(b.nbytes for b in model.buffers())
        return cls.from_config(cfg, next(model.parameters()).dtype.itemsize, weights)

    @classmethod
    def from_config(cls, cfg, dtype_bytes: int, weight_bytes: int) -> "ModelShape":
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return cls(layers=cfg.num_hidden_layers, kv_heads=cfg.num_key_value_heads, q_heads=cfg.num_attention_heads,
                   head_dim=head_dim, hidden=cfg.hidden_size, intermediate=cfg.intermediate_size,
                   vocab=cfg.vocab_size, dtype_bytes=dtype_bytes, weight_bytes=weight_bytes)

    @classmethod
    def of_preset(cls, name: str, dtype_bytes: int = 2) -> "ModelShape":
        """A preset's real shape (``snapeval models``), weights counted from its parameters, without loading it."""
        from snapeval.models.presets import get_preset

        preset = get_preset(name)
        return cls.from_config(preset.hf_config(), dtype_bytes, preset.param_count() * dtype_bytes)

    # --- KV bytes ----------------------------------------------------------------------------------------------
    @property
    def kv_token_bytes(self) -> int:
        """Keys and values of one token over all layers (one row)."""
        return self.layers * self.kv_heads * self.head_dim * 2 * self.dtype_bytes

    def dynamic_cache_bytes(self, tokens: int, rows: int = 1) -> int:
        """A Hugging Face ``DynamicCache`` (the full cache, a kvpress press's cache): keys and values only."""
        return rows * tokens * self.kv_token_bytes

    def rows_cache_bytes(self, slots: int, rows: int = 1) -> int:
        """A compressed-cache layout (:class:`~snapeval.cache.base.CompressedKVCache`): per layer ``keys`` and
        ``values`` ``[R, Hkv, S, D]``, ``positions`` ``[R, Hkv, S]`` int64, ``next_position`` and ``fill`` ``[R]``."""
        per_layer = rows * (slots * self.kv_heads * (2 * self.head_dim * self.dtype_bytes + INT64) + 2 * INT64)
        return self.layers * per_layer

    def capture_bytes(self, prompt: int, window: int) -> int:
        """A one-row capture of ``prompt`` tokens (:meth:`~snapeval.cache.capture.PromptCapture.nbytes`): per layer
        the keys and values, the last ``window`` queries, the key validity ``[1, L]`` (bool) and positions
        ``[1, L]`` (int64)."""
        per_layer = (prompt * self.kv_heads * self.head_dim * 2 * self.dtype_bytes
                     + self.q_heads * min(window, prompt) * self.head_dim * self.dtype_bytes + prompt * (1 + INT64))
        return self.layers * per_layer

    def window_transient_bytes(self, prompt: int, window: int) -> int:
        """One layer's window attention while it is computed: float32 logits and softmax ``[Hq, W, L]``, and the
        window sums ``[Hq, L]`` kept for every budget until the layer is released."""
        return 2 * self.q_heads * min(window, prompt) * prompt * 4 + self.q_heads * prompt * 4

    def activation_bytes(self, tokens: int, context: int | None = None) -> int:
        """Live activations of one decoder layer's forward over ``tokens`` query tokens: what the model's forward
        holds through every layer (the embeddings' output and the layer's input ``[T, hidden]``, RoPE's cos and sin
        ``[T, head_dim]``) and, inside the layer, the residual stream and the normed input ``[T, hidden]`` with, at
        the MLP, gate/up/product ``[T, intermediate]``; at the attention, the projected and rotated queries, keys
        and values and the output. Attention itself is SDPA's fused kernel (no ``[T, L]`` matrix); the logits of
        the last position only. ``context``: keys attended (a prefill chunk attends to the whole prefix), which
        adds nothing with the fused kernel. Checked against the live tensors of a real forward
        (``tests/test_memory_plan.py``); an H100 run of Llama-3.1-8B at 128k measured the two held ``[T, hidden]``
        tensors and cos/sin (2.07 GiB) that an earlier estimate left out (``results/bench/gpu_shared.json``)."""
        held = 2 * self.hidden + 2 * self.head_dim
        mlp = 3 * self.intermediate + 2 * self.hidden
        attention = 3 * self.hidden + 3 * (self.q_heads + 2 * self.kv_heads) * self.head_dim
        return tokens * (held + max(mlp, attention)) * self.dtype_bytes + self.vocab * 4

    def decode_step_bytes(self, rows: int) -> int:
        """A decode step of ``rows`` rows: one token's activations per row and the float logits ``[R, V]``."""
        return rows * (self.activation_bytes(1) + self.vocab * self.dtype_bytes)


# ---------------------------------------------------------------------------------------------------------------------
# what each configuration holds


#: The per-configuration sizes below are pure functions of frozen values (a :class:`ModelShape`, a frozen
#: :class:`~snapeval.cache.config.MethodConfig`, token counts), and a plan's search asks for the same ones hundreds of
#: times (every chunk size, host placement and shared step it weighs; a projection re-plans every chunk): each is
#: remembered.
_remembered = functools.lru_cache(maxsize=1 << 14)


@_remembered
def _is_press(config: MethodConfig) -> bool:
    """It compresses in its own prefill hooks (a kvpress press), holding the cache its hook built besides its rows:
    its entry names them (:attr:`~snapeval.cache.methods.MethodInfo.prefill_hook`)."""
    from snapeval.cache.methods import method_info

    return bool(method_info(config).prefill_hook)


@_remembered
def _static_rows(config: MethodConfig) -> bool:
    from snapeval.cache.methods import method_info

    return method_info(config).static_rows


@_remembered
def branch_bytes(shape: ModelShape, config: MethodConfig, prompt: int) -> int:
    """One item's one-row branch of ``config`` as held until its rows decode: the engine's layout cut to its kept
    prompt (:meth:`~snapeval.cache.config.MethodConfig.kept_tokens`: a prompt shorter than a fixed-size budget fills
    a prefix of the layout, with at most one empty slot where SnapStream's ring starts, and the branch keeps that
    prefix only,
    :meth:`~snapeval.cache.base.CompressedKVCache.compact_layer`), plus, for a kvpress press, the cache its prefill
    hook built (keys and values of the kept tokens)."""
    slots = config.cache_slots(prompt, 0)
    if not _is_press(config):  # the filled prefix: the kept tokens and at most one empty slot before the ring's first
        slots = min(slots, config.kept_tokens(prompt, 0) + 1)
    held = shape.rows_cache_bytes(slots)
    if _is_press(config):
        held += shape.dynamic_cache_bytes(config.kept_tokens(prompt, 0))
    return held


@_remembered
def row_slots(config: MethodConfig, prompt: int, max_new: int) -> int:
    """Slots of one engine row for a request (:meth:`~snapeval.cache.config.MethodConfig.cache_slots`)."""
    return config.cache_slots(prompt, max_new)


@_remembered
def engine_bytes(shape: ModelShape, config: MethodConfig, rows: int, prompt: int, max_new: int) -> int:
    """An engine of ``rows`` rows for requests of up to ``prompt`` tokens and ``max_new`` new ones: its cache rows,
    its token and position ids ``[R, 1]`` int64."""
    return shape.rows_cache_bytes(row_slots(config, prompt, max_new), rows) + 2 * rows * INT64


@_remembered
def alone_cache_bytes(shape: ModelShape, config: MethodConfig, prompt: int, generated: int = 0) -> int:
    """The cache of a configuration decoded alone after its prefill and ``generated`` fed-back tokens (a decode of
    ``n`` new tokens feeds back ``n - 1``): a ``DynamicCache`` of the kept tokens for the full cache and for presses,
    the compressed layout otherwise."""
    if config.budget is None or _is_press(config):
        return shape.dynamic_cache_bytes(config.kept_tokens(prompt, generated))
    return shape.rows_cache_bytes(config.cache_slots(prompt, generated))


@_remembered
def holds_whole_prompt(config: MethodConfig, prompt: int) -> bool:
    """Whether ``config`` keeps every prompt token (the full cache, or a budget of at least the prompt)."""
    return config.kept_tokens(prompt, 0) >= prompt


# ---------------------------------------------------------------------------------------------------------------------
# the plan


@dataclass(frozen=True)
class ConfigurationPlan:
    """How one configuration of the group decodes and what it holds.

    Attributes:
        label: the configuration (``snapstream@1024``).
        decode: ``"rows"`` (the chunk's items together in static engine rows) or ``"alone"`` (item by item, right
            after each item's prefill: from the capture, or from its own prefill for a method that cannot branch).
        rows: decode rows (the engine's slots; 1 alone).
        branch_bytes: one item's held branch (rows only; 0 alone).
        decode_bytes: the engine's rows, or the cache decoded alone at its largest.
    """

    label: str
    decode: str
    rows: int
    branch_bytes: int
    decode_bytes: int


@dataclass(frozen=True)
class GroupPlan:
    """A shared group's memory plan (bytes; ``peak_bytes`` is above what was in use when the group started).

    Attributes:
        device: where the group's tensors live.
        budget_bytes: the device's budget for everything (weights included); None: unbounded.
        in_use_bytes: what was in use when the group started (weights included).
        weights_bytes: the model's parameters and buffers.
        chunk: items in flight (held branches, engine rows).
        prefill_tokens: tokens per prefill forward (the longest prompt when the prompt is prefilled at once).
        capture_on_host: the capture lives in host memory and is streamed back layer by layer.
        prompt_tokens, max_new_tokens: the largest item the plan is sized for.
        capture_bytes, activation_bytes, window_bytes: one item's capture, its prefill's activations, one layer's
            window attention while computed.
        configurations: each configuration's decode mode and bytes.
        phases: the group's growth at the top of each phase (prefill, branch, alone, decode).
        peak_bytes: the largest phase.
        reasons: why the chunk or the prefill was cut (empty when the asked-for chunk fits).
        alone_captured: a configuration decoded alone does so in a captured engine of one row (its branch built into
            the row: :func:`captures_alone`); False: in the eager loop, growing its own cache.
        branches_on_host: the chunk's held branches wait in host memory (each layer moved there once built, copied
            back into an engine row on admission); the device holds none of them.
        host_budget_bytes, host_in_use_bytes: the host's budget for the group (in use included; None: not
            considered) and what the process held there when the group started.
        shared_step: the configurations decoded in rows share one engine (:class:`~snapeval.engine.segmented.
            SegmentedEngine`): one step decodes every one of their rows, each in its own segment, the weights read
            once for all of them; each has ``rows`` rows and the engines' rows are held together.
    """

    device: str
    budget_bytes: int | None
    in_use_bytes: int
    weights_bytes: int
    chunk: int
    prefill_tokens: int
    capture_on_host: bool
    prompt_tokens: int
    max_new_tokens: int
    capture_bytes: int
    activation_bytes: int
    window_bytes: int
    configurations: tuple[ConfigurationPlan, ...]
    phases: dict[str, int] = field(default_factory=dict)
    peak_bytes: int = 0
    reasons: tuple[str, ...] = ()
    alone_captured: bool = False
    branches_on_host: bool = False
    host_budget_bytes: int | None = None
    host_in_use_bytes: int = 0
    shared_step: bool = False

    @property
    def total_bytes(self) -> int:
        """What the device holds at the group's peak: in use at the start plus the group's own peak."""
        return self.in_use_bytes + self.peak_bytes

    @property
    def fits(self) -> bool:
        return (self.budget_bytes is None or self.total_bytes <= self.budget_bytes) and self.fits_host

    @property
    def host_bytes(self) -> int:
        """What the held branches take in host memory (0 when they stay on the device)."""
        return self.held_bytes if self.branches_on_host else 0

    @property
    def fits_host(self) -> bool:
        return (not self.branches_on_host or self.host_budget_bytes is None
                or self.host_in_use_bytes + self.host_bytes <= self.host_budget_bytes)

    def decode_mode(self, label: str) -> ConfigurationPlan:
        return next(c for c in self.configurations if c.label == label)

    @property
    def held_bytes(self) -> int:
        """Every configuration's branches of a full chunk, held until its rows decode."""
        return self.chunk * sum(c.branch_bytes for c in self.configurations)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["configurations"] = [asdict(c) for c in self.configurations]
        out["total_bytes"] = self.total_bytes
        out["fits"] = self.fits
        out["total_gib"] = gib(self.total_bytes)
        out["peak_gib"] = gib(self.peak_bytes)
        out["budget_gib"] = None if self.budget_bytes is None else gib(self.budget_bytes)
        out["host_bytes"] = self.host_bytes
        return out

    def chunk_summary(self, items: Sequence[int]) -> dict:
        """What one chunk of ``items`` (indices) ran with under this plan, for the provenance: its items, the largest
        prompt the plan is sized for, each configuration's rows (0: decoded alone), where the branches waited."""
        return {"items": list(items), "prompt_tokens": self.prompt_tokens, "chunk": self.chunk,
                "rows": {c.label: c.rows if c.decode == "rows" else 0 for c in self.configurations},
                "branches_on_host": self.branches_on_host, "peak_gib": gib(self.peak_bytes)}

    def render(self) -> str:
        """A few lines for people: the chunk, where the memory goes, and whether it fits."""
        budget = "unbounded" if self.budget_bytes is None else f"{gib(self.budget_bytes)} GiB"
        alone = [c.label for c in self.configurations if c.decode == "alone"]
        lines = [f"memory plan on {self.device}: chunk {self.chunk}, prefill {self.prefill_tokens} tokens per forward"
                 f"{', capture in host memory' if self.capture_on_host else ''}; peak {gib(self.total_bytes)} GiB "
                 f"of {budget} ({'fits' if self.fits else 'does NOT fit'})",
                 f"  weights {gib(self.weights_bytes)} GiB, capture {gib(self.capture_bytes)} GiB, activations "
                 f"{gib(self.activation_bytes)} GiB, held branches {gib(self.held_bytes)} GiB per chunk"
                 + (" in host memory" if self.branches_on_host else ""),
                 "  phases: " + ", ".join(f"{k} {gib(v)} GiB" for k, v in self.phases.items())]
        if alone:
            lines.append(f"  decoded alone from the capture: {', '.join(alone)}")
        if self.shared_step:
            lines.append("  one decode step for every configuration decoded in rows")
        lines += [f"  {r}" for r in self.reasons]
        return "\n".join(lines)


@dataclass(frozen=True)
class Item:
    """One item's lengths: ``prompt`` tokens (and a shared ``prefix`` held while its suffixes run), up to
    ``max_new`` generated tokens."""

    prompt: int
    max_new: int
    prefix: int = 0


@_remembered
def row_bytes(shape: ModelShape, config: MethodConfig, prompt: int, max_new: int) -> int:
    """What one more decode row of ``config`` costs: its engine row (:func:`engine_bytes`) and one row of a decode
    step's activations and logits (:meth:`ModelShape.decode_step_bytes`)."""
    return engine_bytes(shape, config, 1, prompt, max_new) + shape.decode_step_bytes(1)


def engine_slots(shape: ModelShape, config: MethodConfig, prompt: int, max_new: int, *, requests: int,
                 budget: int, in_use: int = 0) -> int:
    """The slot count of one engine for ``requests`` requests of up to ``prompt`` tokens and ``max_new`` new ones
    (AIME with an R1 distill: 64 samples of up to 32k new tokens): as many rows as ``budget`` holds above
    ``in_use`` (weights included) at :func:`row_bytes` each, at most ``requests``. Small budgets get hundreds of
    slots; continuous batching (:class:`~snapeval.engine.Engine`) refills each one as its request ends. Raises a
    one-line :class:`SnapevalError` when not even one row fits."""
    per_row = row_bytes(shape, config, prompt, max_new)
    slots = min(requests, max(0, budget - in_use) // per_row)
    if slots < 1:
        raise SnapevalError(f"max_memory={gib(budget)} GiB is too small for one {config.label} row of "
                            f"{prompt}+{max_new} tokens ({gib(per_row)} GiB, {gib(in_use)} GiB in use); allowed: a "
                            "larger max_memory or a smaller budget")
    return int(slots)


def longest_first(device: str) -> bool:
    """Whether a group on ``device`` takes its items longest prompt first, each chunk planned for the items left
    (:meth:`~snapeval.branching.BranchSet.generate`): on a GPU, where a chunk's rows are what fits the device at its
    largest prompt, so a chunk of shorter prompts decodes in more rows (LongBench-v2: prompts of 4k to 128k tokens
    in one group). Elsewhere the items go in input order under one plan (the CPU's rows are the run's batch)."""
    return device.startswith("cuda")


def shares_documents(device: str) -> bool:
    """Whether a group on ``device`` prefills once the document that several items of one call open with
    (LongBench-v2's questions on one document; samples of one long prompt), each item then computing only its own
    suffix (:meth:`~snapeval.branching.BranchSet.generate`, :func:`~snapeval.branching.document_families`): on a
    GPU, where a 70k-token prefill takes seconds. Elsewhere every item is prefilled whole, the reference path (a
    continued prefill equals a whole one up to float rounding)."""
    return device.startswith("cuda")


def chunk_order(items: Sequence[Item], by_length: bool, families: Sequence[int | None] | None = None) -> list[int]:
    """The indices of ``items`` in the order a group takes them: longest prompt first when ``by_length`` (ties in
    input order), else input order. ``families``: per item, its document family (:func:`~snapeval.branching.
    document_families`) or None; the members of a family go together, in input order, where its first member (by
    length: its longest) would go."""
    order = list(range(len(items)))
    if by_length:
        order = sorted(order, key=lambda i: -items[i].prompt)
    if not families or all(f is None for f in families):
        return order
    members: dict[int, list[int]] = {}
    for i in range(len(items)):
        if families[i] is not None:
            members.setdefault(families[i], []).append(i)
    out, placed = [], set()
    for i in order:
        family = families[i]
        if family is None:
            out.append(i)
        elif family not in placed:
            placed.add(family)
            out += members[family]
    return out


def captures_alone(config: MethodConfig, captured: bool) -> bool:
    """Whether ``config``, decoded alone, decodes in a captured engine of one row (a GPU run that captures, a method
    with a static-row layout) rather than in the eager loop from its own cache. The row is made first and the branch
    built into it layer by layer (:meth:`~snapeval.branching.BranchSet._one_row_engine`)."""
    return captured and _static_rows(config) and not _is_press(config)


def _decodes_in_rows(shape: ModelShape, config: MethodConfig, chunk: int, prompt: int, max_new: int,
                     alone: set[str], batch_whole: bool) -> bool:
    """Whether :func:`_configuration_plans` decodes ``config`` in rows (see there)."""
    if config.label in alone or not _static_rows(config):
        return False
    if not batch_whole and not config.FIXED_SIZE and holds_whole_prompt(config, prompt):
        return engine_bytes(shape, config, chunk, prompt, max_new) <= shape.weight_bytes  # pays below them
    return True


def _configuration_plans(shape: ModelShape, configs: Sequence[MethodConfig], chunk: int, prompt: int,
                         max_new: int, alone: set[str], room: int | None = None,
                         batch_whole: bool = False, captured: bool = False,
                         shared: bool = False, decoded_in_rows: Sequence[bool] | None = None
                         ) -> tuple[ConfigurationPlan, ...]:
    """Each configuration's decode: in rows, as many as fit ``room`` (the bytes left for one engine once the chunk's
    branches are held; None: unbounded) at its own :func:`row_bytes`, at most ``chunk`` and at least 1; or alone.
    ``batch_whole``: a cache of the whole prompt decodes in rows too (a GPU, where a captured batched step pays at
    any length: the issue's 128k full cache ran 112 tok/s at batch 3 against 67 alone); otherwise only while its
    rows hold fewer bytes than the weights. ``captured``: a configuration decoded alone does so in an engine of one
    row (:func:`captures_alone`), its branch built into that row. ``shared``: the configurations in rows share one
    engine (:attr:`GroupPlan.shared_step`): each the same rows, as many as fit ``room`` with one row of each.
    ``decoded_in_rows``: per configuration, :func:`_decodes_in_rows` where the caller has it already."""
    if decoded_in_rows is None:
        decoded_in_rows = [_decodes_in_rows(shape, c, chunk, prompt, max_new, alone, batch_whole) for c in configs]
    together = sum(row_bytes(shape, c, prompt, max_new) for c, r in zip(configs, decoded_in_rows) if r) if shared else 0
    plans = []
    for config, in_rows in zip(configs, decoded_in_rows):
        if in_rows:
            per_row = together or row_bytes(shape, config, prompt, max_new)
            rows = chunk if room is None else max(1, min(chunk, room // per_row))
            plans.append(ConfigurationPlan(config.label, "rows", rows, branch_bytes(shape, config, prompt),
                                           engine_bytes(shape, config, rows, prompt, max_new)))
        elif captures_alone(config, captured):
            plans.append(ConfigurationPlan(config.label, "alone", 1, 0, engine_bytes(shape, config, 1, prompt, max_new)))
        else:
            plans.append(ConfigurationPlan(config.label, "alone", 1, 0,
                                           alone_cache_bytes(shape, config, prompt, max(max_new - 1, 0))))
    return tuple(plans)


def _phases(shape: ModelShape, configs: Sequence[MethodConfig], plans: tuple[ConfigurationPlan, ...], chunk: int,
            item: Item, prefill_tokens: int, window: int, alone: set[str], on_host: bool,
            flight: int | None = None, captured: bool = False, held_on_host: bool = False,
            shared: bool = False) -> dict[str, int]:
    """The group's growth at the top of each phase of a chunk of the largest items (see the module's docstring);
    ``flight``: the items a chunk actually holds (fewer than ``chunk`` rows when the call has fewer items);
    ``held_on_host``: the held branches wait in host memory (one layer of them on the device while it is built);
    ``shared``: the configurations in rows decode in one engine, their rows held together."""
    pairs = list(zip(configs, plans))  # each configuration with its plan (both in the group's order)
    held_one = sum(p.branch_bytes for p in plans)
    held_device = 0 if held_on_host else held_one  # what one item's held branches keep on the device
    flight = chunk if flight is None else min(chunk, flight)
    earlier = (flight - 1) * held_device  # the chunk's earlier items wait with their branches
    capture = shape.capture_bytes(item.prompt, window)
    layer = capture // shape.layers
    on_device = layer if on_host else capture
    prefix = shape.capture_bytes(item.prefix, window) if item.prefix else 0
    presses = sum(shape.dynamic_cache_bytes(c.kept_tokens(item.prompt, 0)) for c in configs
                  if _is_press(c) and c.label not in alone)
    # decoded alone from the shared prefill (not a press that prefills itself): each built from the capture
    shared_alone = [(c, p) for c, p in pairs if p.decode == "alone" and c.label not in alone]
    alone_built = sum(alone_cache_bytes(shape, c, item.prompt) for c, _ in shared_alone)
    # each held layer leaves for the host once built, when the branches wait there
    built = (held_one // shape.layers if held_on_host else held_one) + alone_built
    # a captured one-row engine's row is allocated whole before the capture's layers move into the branches
    one_rows = sum(p.decode_bytes for c, p in shared_alone if captures_alone(c, captured))
    # a held branch's layer is built at the whole layout before it is cut to its kept prompt
    whole = held_one + alone_built + sum(shape.rows_cache_bytes(c.cache_slots(item.prompt, 0)) - p.branch_bytes
                                         for c, p in pairs if p.decode == "rows" and not _is_press(c))
    phases = {"prefill": earlier + prefix + on_device + presses + shape.activation_bytes(prefill_tokens, item.prompt),
              # the capture's layers move into the branches one by one: the larger of the two, plus a layer of each
              "branch": earlier + prefix + presses + max(on_device, built - one_rows) + one_rows + layer
              + whole // shape.layers
              + shape.window_transient_bytes(item.prompt, window)}
    if any(p.decode == "alone" for p in plans):
        # the eager loop grows its branch in place; a captured engine's row is made first and the branch is built
        # into it layer by layer: either way the decode's cache takes the branch's place
        growth = max(p.decode_bytes - (alone_cache_bytes(shape, c, item.prompt) if c.label not in alone else 0)
                     + p.decode_bytes // shape.layers for c, p in pairs if p.decode == "alone")
        phases["alone"] = (flight * held_device + prefix + alone_built + growth + shape.decode_step_bytes(1)
                           + (shape.activation_bytes(prefill_tokens, item.prompt) if alone else 0))
    in_rows = [p for p in plans if p.decode == "rows"]
    if in_rows and shared:
        phases["decode"] = (flight * held_device + sum(p.decode_bytes for p in in_rows)
                            + shape.decode_step_bytes(sum(p.rows for p in in_rows)))
    elif in_rows:
        phases["decode"] = flight * held_device + max(p.decode_bytes + shape.decode_step_bytes(p.rows) for p in in_rows)
    return phases


def plan_group(shape: ModelShape, configs: Sequence[MethodConfig], items: Sequence[Item], *, chunk: int,
               window: int, budget: int | None = None, in_use: int = 0, device: str = "cpu",
               prefill_tokens: int | None = None, alone: set[str] = frozenset(), captured: bool = False,
               host_budget: int | None = None, host_in_use: int = 0, one_step: bool = False) -> GroupPlan:
    """:func:`_plan_group`; in a ``captured`` run on a GPU, of the plans whose configurations decoded alone run in a
    captured engine of one row (beside their branch) or in the eager loop (in place), the one that fits with the
    fewest :func:`bytes_per_token` (the eager loop weighted by :data:`EAGER_STEP_FACTOR`). ``host_budget``: on a
    GPU, the bytes the host may hold (``host_in_use`` of them in use), so that held branches may wait there.
    ``one_step``: the run's decode kernel attends over several configurations' rows in one launch, in place
    (:data:`snapeval.cache.kernels.RAGGED_IN_PLACE`), so that on a GPU the configurations in rows may share one
    step (:attr:`GroupPlan.shared_step`)."""
    kwargs = dict(chunk=chunk, window=window, budget=budget, in_use=in_use, device=device,
                  prefill_tokens=prefill_tokens, alone=alone, host_budget=host_budget, host_in_use=host_in_use,
                  one_step=one_step)
    if not (captured and device.startswith("cuda")):
        return _plan_group(shape, configs, items, captured=False, **kwargs)
    plans = []
    for engine_alone in (True, False):
        try:
            plan = dataclasses.replace(_plan_group(shape, configs, items, captured=engine_alone, **kwargs),
                                       alone_captured=engine_alone)
        except SnapevalError:
            continue
        plans.append(plan)
    if not plans:  # neither fits: the eager loop's own one-line error
        return _plan_group(shape, configs, items, captured=False, **kwargs)
    return min(plans, key=lambda p: (bytes_per_token(shape, p, captured=True), not p.alone_captured))


def _plan_group(shape: ModelShape, configs: Sequence[MethodConfig], items: Sequence[Item], *, chunk: int,
                window: int, budget: int | None = None, in_use: int = 0, device: str = "cpu",
                prefill_tokens: int | None = None, alone: set[str] = frozenset(), captured: bool = False,
                host_budget: int | None = None, host_in_use: int = 0, one_step: bool = False) -> GroupPlan:
    """The plan of a group: the largest chunk, at most ``chunk``, whose peak fits ``budget``; if one item does not
    fit, prompts are prefilled in token chunks (never below :data:`MIN_PREFILL_TOKENS`) and, on a GPU, the capture
    is kept in host memory. Raises a one-line :class:`SnapevalError` when nothing fits. ``prefill_tokens`` forces
    a prefill chunk (tokens per forward); ``alone``: labels of configurations that prefill themselves (a press
    that cannot branch), decoded alone; ``captured``: the run captures its decode steps (a configuration decoded
    alone then decodes in an engine of one row, :func:`captures_alone`); ``host_budget``: on a GPU the held branches
    may wait in host memory, within it (see the module's docstring)."""
    if not items:
        raise ValueError("a memory plan needs at least one item")
    check_int("chunk", chunk, 1)
    largest = Item(max(i.prompt for i in items), max(i.max_new for i in items), max(i.prefix for i in items))
    presses = any(_is_press(c) and c.label not in alone for c in configs)
    reasons: list[str] = []
    asked = chunk  # rows per engine: as asked even for fewer items (the decode batch, so its numerics, stays the same)
    whole = largest.prompt

    def build(n: int, tokens: int, on_host: bool, held_on_host: bool = False, shared: bool = False) -> GroupPlan:
        in_rows = [_decodes_in_rows(shape, c, n, largest.prompt, largest.max_new, alone, batch_whole) for c in configs]
        room = None
        if budget is not None:  # rows: as many as fit what one engine may take once the chunk's branches are held
            held_one = sum(branch_bytes(shape, c, largest.prompt) for c, r in zip(configs, in_rows) if r)
            held = 0 if held_on_host else min(n, len(items)) * held_one
            room = max(0, budget - in_use - held)
        plans = _configuration_plans(shape, configs, n, largest.prompt, largest.max_new, alone, room, batch_whole,
                                     captured, shared, in_rows)
        shared = shared and sum(1 for p in plans if p.decode == "rows") > 1  # one engine of one: not shared
        phases = _phases(shape, configs, plans, n, largest, tokens, window, alone, on_host, flight=len(items),
                         captured=captured, held_on_host=held_on_host, shared=shared)
        return GroupPlan(device=device, budget_bytes=budget, in_use_bytes=in_use, weights_bytes=shape.weight_bytes,
                         chunk=n, prefill_tokens=tokens, capture_on_host=on_host, prompt_tokens=largest.prompt,
                         max_new_tokens=largest.max_new, capture_bytes=shape.capture_bytes(largest.prompt, window),
                         activation_bytes=shape.activation_bytes(tokens, largest.prompt),
                         window_bytes=shape.window_transient_bytes(largest.prompt, window), configurations=plans,
                         phases=phases, peak_bytes=max(phases.values()), reasons=tuple(reasons),
                         branches_on_host=held_on_host, host_budget_bytes=host_budget if held_on_host else None,
                         host_in_use_bytes=host_in_use if held_on_host else 0, shared_step=shared)

    tokens = whole if prefill_tokens is None else min(prefill_tokens, whole)

    def largest_chunk(n: int) -> tuple[int, GroupPlan]:
        plan = build(n, tokens, False)
        while not plan.fits and n > 1:
            n = max(1, n // 2)
            plan = build(n, tokens, False)
        return n, plan

    batch_whole = False
    chunk, plan = largest_chunk(asked)
    if device.startswith("cuda"):
        # On a GPU decode is bound by the bytes a step moves: the chunk (and whether a cache of the whole prompt
        # decodes batched in rows or alone) is the one that fits with the fewest bytes per decoded token
        # (:func:`bytes_per_token`: the weights shared by a step's rows, plus each row's own), a larger chunk on a
        # tie. Holding more items gives small-budget configurations more rows but leaves less room for the rows of
        # the large ones; this weighs both.
        # With a host budget the held branches may wait in host memory: every configuration's engine then has the
        # device's whole room for its rows, and the chunk is bounded by the host (its largest chunk is tried too).
        sizes = [asked]
        while sizes[-1] > 1:
            sizes.append(max(1, sizes[-1] // 2))
        hosts = (False,)
        if host_budget is not None:
            hosts = (False, True)
            for batch_whole in (True, False):
                held_one = build(1, tokens, False, True).held_bytes
                if held_one:
                    sizes.append(max(1, min(asked, (host_budget - host_in_use) // held_one)))
        # The configurations in rows may also share one engine (one step reads the weights once for all their rows)
        # at fewer rows each: that too is weighed by bytes per decoded token.
        fitting = []
        for n in sorted(set(sizes), reverse=True):
            for held_on_host in hosts:
                for batch_whole in (True, False):
                    for shared in (False, True) if one_step else (False,):
                        candidate = build(n, tokens, False, held_on_host, shared)
                        if candidate.fits and candidate.shared_step == shared:
                            fitting.append((bytes_per_token(shape, dataclasses.replace(candidate,
                                                                                       alone_captured=captured),
                                                            captured=True), -n, held_on_host, not batch_whole,
                                            shared, candidate))
        if fitting:
            _, _, _, alone_whole, _, plan = min(fitting, key=lambda entry: entry[:5])
            chunk, batch_whole = plan.chunk, not alone_whole
            if alone_whole and any(not c.FIXED_SIZE and holds_whole_prompt(c, whole) for c in configs):
                reasons.append("a cache of the whole prompt decodes alone: batched, its held branches would leave "
                               "the group more bytes per decoded token")
            if chunk < asked:
                reasons.append(f"chunk {asked} -> {chunk}: the fewest bytes per decoded token among the chunks "
                               "that fit")
            if plan.branches_on_host:
                reasons.append(f"held branches in host memory ({gib(plan.host_bytes)} GiB): every engine has the "
                               "device's room for its rows")
            if plan.shared_step:
                reasons.append("one decode step for the configurations in rows: the weights read once for all their "
                               "rows leave fewer bytes per decoded token than an engine each")
            plan = dataclasses.replace(plan, reasons=tuple(reasons))
        else:
            batch_whole = False
            chunk, plan = largest_chunk(asked)
    elif chunk < asked and plan.fits:
        reasons.append(f"chunk {asked} -> {chunk}: {asked} items' branches and rows exceed the budget")
        plan = build(chunk, tokens, False)
    if not plan.fits and prefill_tokens is None and not presses:  # presses read the whole prompt's hidden states
        while not plan.fits and tokens > MIN_PREFILL_TOKENS:
            tokens = max(MIN_PREFILL_TOKENS, tokens // 2)
            plan = build(1, tokens, False)
        if tokens < whole:
            reasons.append(f"prefill in chunks of {tokens} tokens: one {whole}-token forward's activations exceed "
                           "the budget")
            plan = build(1, tokens, False)
    if not plan.fits and device.startswith("cuda"):
        plan = build(1, tokens, True)
        reasons.append("capture in host memory, streamed back layer by layer")
        plan = build(1, tokens, True)
    if not plan.fits:
        raise SnapevalError(
            f"max_memory={gib(budget)} GiB on {device} is too small for this group: one {largest.prompt}-token item "
            f"needs {gib(plan.total_bytes)} GiB ({gib(plan.in_use_bytes)} GiB already in use); allowed: a larger "
            "max_memory, shorter prompts, or fewer configurations per group")
    return plan


#: How much slower an eager decode step is than the same step replayed as a CUDA graph, at batch 1: the full cache's
#: eager over CUDA-graph batch-1 step in ``results/bench/gpu.json`` (one H100: 5.10x at 32k and 64k, 2.99x at 128k;
#: the median). The plan weighs a configuration decoded alone in the eager loop with it, in a run that captures.
EAGER_STEP_FACTOR = 5.1
#: The bandwidth a decode step's bytes are counted at: the simulator's H100 fit (90% of 3.35 TB/s).
DEVICE_BYTES_PER_S = 0.9 * 3.35e12
#: A captured decode step's fixed time as bytes it could have moved: the simulator's H100 ``decode_step_fixed_s``
#: (4.4 ms, the mean residual of the 12 CUDA-graph points of ``results/bench/gpu.json``) at
#: :data:`DEVICE_BYTES_PER_S`. A step pays it once for all its rows.
STEP_FIXED_BYTES = int(4.4e-3 * DEVICE_BYTES_PER_S)
#: Bytes per second a held branch crosses the host link each way (device to host once built, back into an engine
#: row): an assumption, not a measurement here. PCIe 5.0 x16 carries 63 GB/s each way; the branches move as pageable
#: copies (pinned host memory would be allocated in powers of two, up to twice the plan's bytes), taken at a third
#: of that. ``benchmarks.paper_projection`` measures the link of the GPU it runs on.
HOST_LINK_BYTES_PER_S = 20e9


def bytes_per_token(shape: ModelShape, plan: GroupPlan, captured: bool = False) -> float:
    """Bytes a GPU moves per decoded token of one item over every configuration of ``plan``: a configuration in
    ``rows`` rows reads the weights once per step for all of them and its rows' cache, so ``(weights + its engine's
    bytes) / rows`` (``rows`` the tokens a step decodes on average over the chunk's waves); one decoded alone, the
    weights and its cache for each token (a decode step is bound by these bytes: ``docs/engine.md``), plus each
    step's fixed time (:data:`STEP_FIXED_BYTES`) shared by its rows. In a
    ``captured`` run a configuration the plan decodes alone in the eager loop counts :data:`EAGER_STEP_FACTOR` times
    (its step pays the host's launches, the others' do not). A ``shared_step`` plan's configurations in rows count
    one step for all of them: the fixed time and the weights once, every engine's rows. Branches held in host memory
    add their trip there and back at :data:`HOST_LINK_BYTES_PER_S`, counted as the device bytes moved in that
    time."""
    def weight(c: ConfigurationPlan) -> float:
        return EAGER_STEP_FACTOR if captured and c.decode == "alone" and not plan.alone_captured else 1.0

    def tokens_per_step(c: ConfigurationPlan) -> float:
        """A chunk's requests decode to the plan's ``max_new_tokens`` in waves of ``rows``: ``chunk`` requests in
        ``ceil(chunk / rows)`` waves, each step moving every row's bytes (a partly filled last wave too)."""
        return plan.chunk / math.ceil(plan.chunk / c.rows) if c.decode == "rows" else 1.0

    def step(together: list[ConfigurationPlan]) -> float:
        """One step of these configurations' rows: its fixed time, the weights, and every row's bytes."""
        return STEP_FIXED_BYTES + shape.weight_bytes + sum(c.decode_bytes for c in together)

    shared = [c for c in plan.configurations if c.decode == "rows"] if plan.shared_step else []
    moved = sum(weight(c) * step([c]) / tokens_per_step(c) for c in plan.configurations if c not in shared)
    if shared:  # one step for every row of them: its fixed time and the weights paid once
        moved += step(shared) / tokens_per_step(shared[0])
    if plan.branches_on_host:  # an item's branches go to the host and back, as device bytes of the same time
        moved += (2 * sum(c.branch_bytes for c in plan.configurations) * DEVICE_BYTES_PER_S / HOST_LINK_BYTES_PER_S
                  / max(1, plan.max_new_tokens))
    return moved


# ---------------------------------------------------------------------------------------------------------------------
# the device's budget and the measured peak


def _status_bytes(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise OSError(f"no {key} in /proc/self/status")


def _meminfo_bytes(key: str) -> int:
    for line in open("/proc/meminfo"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise OSError(f"no {key} in /proc/meminfo")


def bytes_in_use(device) -> int:
    """What the process holds on ``device`` now: CUDA: bytes allocated by torch; CPU: resident memory."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    return _status_bytes("VmRSS")


def device_budget(device, max_memory: int | None = None) -> int:
    """The bytes a group may use on ``device``, weights included: ``max_memory`` when given, else what is in use
    plus what is free (CUDA: free device memory and torch's unused reserve; CPU: the kernel's available memory),
    less a margin (the larger of 1 GiB and 8% of the device)."""
    import torch

    if max_memory is not None:
        return int(max_memory)
    device = torch.device(device)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        usable = free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    else:
        total, usable = _meminfo_bytes("MemTotal"), _meminfo_bytes("MemAvailable")
    margin = max(MARGIN_BYTES, int(MARGIN_FRACTION * total))
    return max(0, bytes_in_use(device) + usable - margin)


class PeakMeter:
    """The measured peak of a stretch of work on ``device``: CUDA: torch's peak allocated bytes; CPU: the process's
    resident high-water mark (``VmHWM``, reset through ``/proc/self/clear_refs``). ``growth_bytes`` is the peak
    above what was in use at the start (what a :class:`GroupPlan`'s ``peak_bytes`` predicts)."""

    def __init__(self, device):
        import torch

        self.device = torch.device(device)
        self.source = "cuda_max_memory_allocated" if self.device.type == "cuda" else "cpu_vmhwm"
        self.start_bytes = 0
        self.peak = 0

    def __enter__(self) -> "PeakMeter":
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            try:
                with open("/proc/self/clear_refs", "w") as fh:
                    fh.write("5")  # resets VmHWM to the current RSS
            except OSError:
                self.source = "cpu_vmhwm_not_reset"
        self.start_bytes = bytes_in_use(self.device)
        return self

    def __exit__(self, *exc) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = int(torch.cuda.max_memory_allocated(self.device))
        else:
            self.peak = _status_bytes("VmHWM")

    @property
    def growth_bytes(self) -> int:
        return max(0, self.peak - self.start_bytes)

    def to_dict(self) -> dict:
        return {"source": self.source, "start_bytes": self.start_bytes, "peak_bytes": self.peak,
                "growth_bytes": self.growth_bytes, "growth_gib": gib(self.growth_bytes)}


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure (CUDA's ``OutOfMemoryError``, or the CPU allocator's)."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, (RuntimeError, MemoryError)) and ("out of memory" in text or "can't allocate memory" in text
                                                             or isinstance(exc, MemoryError))



# ---------------------------------------------------------------------------------------------------------------------
# the paper-scale prediction

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
