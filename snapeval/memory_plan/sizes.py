"""What each configuration holds: its held branch, its engine's rows, its cache decoded alone, one more row; and
how many engine slots a budget gives (:func:`engine_slots`). Every size is read from the method
(:meth:`~snapeval.cache.config.MethodConfig.kept_tokens`, :meth:`~snapeval.cache.config.MethodConfig.cache_slots`,
``FIXED_SIZE``) and the model's shape, and equals the tensors allocated (``tests/test_memory_plan.py``)."""
from __future__ import annotations

import functools

from snapeval.cache.config import MethodConfig
from snapeval.errors import SnapevalError
from snapeval.memory_plan.shape import ModelShape
from snapeval.memory_plan.units import INT64, gib

#: The per-configuration sizes below are pure functions of frozen values (a :class:`ModelShape`, a frozen
#: :class:`~snapeval.cache.config.MethodConfig`, token counts), and a plan's search asks for the same ones hundreds of
#: times (every chunk size, host placement and shared step it weighs; a projection re-plans every chunk): each is
#: remembered.
_remembered = functools.lru_cache(maxsize=1 << 14)


@_remembered
def is_press(config: MethodConfig) -> bool:
    """It compresses in its own prefill hooks (a kvpress press), holding the cache its hook built besides its rows:
    its entry names them (:attr:`~snapeval.cache.methods.MethodInfo.prefill_hook`)."""
    from snapeval.cache.methods import method_info

    return bool(method_info(config).prefill_hook)


@_remembered
def static_rows(config: MethodConfig) -> bool:
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
    if not is_press(config):  # the filled prefix: the kept tokens and at most one empty slot before the ring's first
        slots = min(slots, config.kept_tokens(prompt, 0) + 1)
    held = shape.rows_cache_bytes(slots)
    if is_press(config):
        held += shape.dynamic_cache_bytes(config.kept_tokens(prompt, 0))
    return held


@_remembered
def layout_bytes(shape: ModelShape, config: MethodConfig, prompt: int) -> int:
    """One item's one-row branch of ``config`` at the engine's whole layout for ``prompt`` (as each layer is built,
    before it is cut to its kept prompt: :func:`branch_bytes`)."""
    return shape.rows_cache_bytes(config.cache_slots(prompt, 0))


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
    if config.budget is None or is_press(config):
        return shape.dynamic_cache_bytes(config.kept_tokens(prompt, generated))
    return shape.rows_cache_bytes(config.cache_slots(prompt, generated))


@_remembered
def holds_whole_prompt(config: MethodConfig, prompt: int) -> bool:
    """Whether ``config`` keeps every prompt token (the full cache, or a budget of at least the prompt)."""
    return config.kept_tokens(prompt, 0) >= prompt


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


def captures_alone(config: MethodConfig, captured: bool) -> bool:
    """Whether ``config``, decoded alone, decodes in a captured engine of one row (a GPU run that captures, a method
    with a static-row layout) rather than in the eager loop from its own cache. The row is made first and the branch
    built into it layer by layer (:meth:`~snapeval.branching.BranchSet._one_row_engine`)."""
    return captured and static_rows(config) and not is_press(config)
