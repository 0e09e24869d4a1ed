"""The ``specprefill`` method: compress a prompt with a draft model, then generate with the target.

``compress_prompt`` is the entry point for integrations (the lm-eval model): prompt text in, the target's prompt
out. ``generate_specprefill`` / ``generate_full`` run the target greedily and time the first token, so that a
result records the kept fraction in target tokens and the time to first token with and without compression.
Time to first token with speculative prefill = draft seconds (draft tokenization, prefill, look-ahead, scoring,
selection, target tokenization) + the target's prefill of the kept prompt.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import torch

from snapeval.cache.methods import METHOD_TABLE
from snapeval.decoding import Request, SamplingParams, decode, pad_token_id, prefill, stop_token_ids
from snapeval.models.devices import input_device
from snapeval.specprefill.config import SpecPrefillConfig
from snapeval.specprefill.mapping import kept_spans, same_tokenizer, spans_text
from snapeval.specprefill.scoring import token_importance
from snapeval.specprefill.selection import Span, default_protected_spans, protected_tokens, select_tokens


@dataclass
class CompressedPrompt:
    """What the target receives.

    Attributes:
        text: the kept prompt text (spans of the original, concatenated in order).
        target_ids: the target's prompt token ids (special tokens such as Gemma's ``<bos>`` included).
        position_ids: original position of each target token (same tokenizer), else None (positions 0..n-1).
        kept_fraction: ``len(target_ids) / full_target_tokens``.
        draft_seconds: wall time of the compression, the time-to-first-token overhead: the draft's tokenization,
            prefill, look-ahead and scoring, then selection and the target's tokenization (not model loading).
        full_target_tokens: target tokens of the uncompressed prompt.
        draft_tokens, kept_draft_tokens: prompt length and kept count in draft tokens.
        spans: kept character spans of the prompt text.
        same_tokenizer: whether the draft and the target share a tokenizer.
    """

    text: str
    target_ids: list[int]
    position_ids: list[int] | None
    kept_fraction: float
    draft_seconds: float
    full_target_tokens: int
    draft_tokens: int
    kept_draft_tokens: int
    spans: list[Span] = field(repr=False)
    same_tokenizer: bool


@functools.lru_cache(maxsize=2)
def load_draft(name: str, dtype: str = "float32"):
    """``(model, tokenizer)`` of a draft model, loaded once per process (``snapeval.load_model``)."""
    from snapeval.models.loading import load_model

    return load_model(name, dtype=dtype)


def _special_strings(*tokenizers) -> list[str]:
    out = []
    for tok in tokenizers:
        out.extend(getattr(tok, "all_special_tokens", []) or [])
    return out


@dataclass
class DraftScores:
    """The draft's reading of one prompt: its tokens, their character offsets and importance scores.

    Attributes:
        ids: draft token ids ``[T]`` (the draft tokenizer's special tokens included, e.g. Gemma's ``<bos>``).
        offsets: ``(start, end)`` character span of each token in the prompt text.
        scores: float ``[T]`` importance, or None when nothing is dropped (keep = 1).
        seconds: wall time of the draft's tokenization, prefill, look-ahead and scoring.
    """

    ids: list[int]
    offsets: list[Span]
    scores: torch.Tensor | None
    seconds: float


def score_prompt(prompt_text: str, config: SpecPrefillConfig, *, draft=None) -> DraftScores:
    """Run the draft over ``prompt_text`` (skipped, scores None, when ``config.keep == 1``).

    The scores do not depend on ``keep`` or ``chunk``: one call can serve several keep fractions
    (``compress_prompt(..., scores=...)``).
    """
    start = time.perf_counter()
    model, tokenizer = draft if draft is not None else load_draft(config.draft, config.draft_dtype)
    encoding = tokenizer(prompt_text, return_offsets_mapping=True)
    ids = list(encoding.input_ids)
    scores = None
    if config.keep < 1.0:
        scores = token_importance(model, ids, lookahead=config.lookahead, pool_kernel=config.pool_kernel)
    return DraftScores(ids, [tuple(o) for o in encoding.offset_mapping], scores, time.perf_counter() - start)


def compress_prompt(
    prompt_text: str,
    target_tokenizer,
    config: SpecPrefillConfig,
    protect: list[Span] | None = None,
    *,
    draft=None,
    scores: DraftScores | None = None,
) -> CompressedPrompt:
    """Compress ``prompt_text`` for a target with ``target_tokenizer`` using ``config.draft``'s attention.

    Args:
        prompt_text: the full prompt as the target would see it (chat template already applied, if any).
        target_tokenizer: the target's fast tokenizer.
        config: the :class:`SpecPrefillConfig`.
        protect: character spans never dropped; None: :func:`default_protected_spans` (chat markers and the
            final question paragraph); ``[]``: nothing beyond inserted special tokens.
        draft: an already loaded ``(model, tokenizer)`` to use instead of loading ``config.draft``.
        scores: the draft's scores of this prompt from :func:`score_prompt` (computed here when None); their
            ``seconds`` count in ``draft_seconds``.
    """
    model, tokenizer = draft if draft is not None else load_draft(config.draft, config.draft_dtype)
    if scores is None:
        scores = score_prompt(prompt_text, config, draft=(model, tokenizer))
    elif scores.scores is None and config.keep < 1.0:
        raise ValueError("compress_prompt: the given DraftScores were computed with keep = 1 (no scores)")
    select_start = time.perf_counter()
    if protect is None:
        protect = default_protected_spans(prompt_text, _special_strings(tokenizer, target_tokenizer))
    ids, offsets = scores.ids, scores.offsets
    protected = protected_tokens(offsets, protect)
    kept = select_tokens(scores.scores, config.keep, config.chunk, protected)
    same = same_tokenizer(tokenizer, target_tokenizer)
    if same:
        index = kept.nonzero().flatten().tolist()
        target_ids = [ids[i] for i in index]
        position_ids = index
        spans = kept_spans(offsets, kept)
        full = len(ids)
    else:
        spans = kept_spans(offsets, kept, protect)
        target_ids = list(target_tokenizer(spans_text(prompt_text, spans)).input_ids)
        position_ids = None
        full = len(target_tokenizer(prompt_text).input_ids)
    return CompressedPrompt(
        text=spans_text(prompt_text, spans),
        target_ids=target_ids,
        position_ids=position_ids,
        kept_fraction=len(target_ids) / max(full, 1),
        draft_seconds=scores.seconds + (time.perf_counter() - select_start),
        full_target_tokens=full,
        draft_tokens=len(ids),
        kept_draft_tokens=int(kept.sum()),
        spans=spans,
        same_tokenizer=same,
    )


@dataclass
class TargetRun:
    """One greedy target generation. ``ttft_seconds`` includes the compression when there is one."""

    text: str
    token_ids: list[int]
    prompt_tokens: int
    prefill_seconds: float
    decode_seconds: float
    ttft_seconds: float
    compressed: CompressedPrompt | None = field(default=None, repr=False)


@torch.inference_mode()
def _greedy(model, tokenizer, ids: list[int], position_ids: list[int] | None, max_new_tokens: int):
    """Greedy decoding with a plain dynamic cache and explicit position ids (:func:`snapeval.decoding.prefill`, then
    :func:`snapeval.decoding.decode`); returns (ids, prefill s, decode s)."""
    from transformers import DynamicCache

    device = input_device(model)
    length = len(ids)
    positions = list(range(length)) if position_ids is None else list(position_ids)
    cache = DynamicCache(config=model.config)
    request = Request(index=0, prompt=list(ids), params=SamplingParams(max_new_tokens=max_new_tokens))
    start = time.perf_counter()
    logits = prefill(model, cache, torch.tensor([ids], device=device),
                     position_ids=torch.tensor([positions], device=device),
                     cache_position=torch.arange(length, device=device))
    times = decode(model, tokenizer, cache, logits, [request], torch.tensor([positions[-1] + 1]),
                   stops=stop_token_ids(model, tokenizer), pad_id=pad_token_id(tokenizer))
    first = times[0]
    return request.token_ids, first - start, time.perf_counter() - first


def _uncompressed(method: str, cache_config) -> bool:
    """Whether the target decodes with every prompt token at its own position: the method table's reference (the
    full cache) or no method configuration."""
    return cache_config is None or METHOD_TABLE.is_reference(method)


def run_target(model, tokenizer, ids, position_ids=None, max_new_tokens=64, method="full", cache_config=None) -> TargetRun:
    """Greedy target generation from prompt token ids, timing the first token.

    The uncompressed reference method (``"full"``: :meth:`~snapeval.cache.methods.MethodTable.is_reference`) or no
    ``cache_config``: a dynamic cache with ``position_ids`` (None: 0..n-1); otherwise ``snapeval.generate`` with that
    compressed cache at contiguous positions.
    """
    if _uncompressed(method, cache_config):
        tokens, prefill, decode = _greedy(model, tokenizer, ids, position_ids, max_new_tokens)
    else:  # a compressed cache on the target: snapeval.generate (contiguous positions)
        from snapeval.generation import generate

        result = generate(model, tokenizer, [ids], cache_config, method=method, max_new_tokens=max_new_tokens)
        tokens, prefill, decode = result[0].token_ids, result.prefill_seconds, result.decode_seconds
    return TargetRun(
        text=tokenizer.decode(tokens, skip_special_tokens=True),
        token_ids=tokens,
        prompt_tokens=len(ids),
        prefill_seconds=prefill,
        decode_seconds=decode,
        ttft_seconds=prefill,
    )


def generate_full(model, tokenizer, prompt_text: str, max_new_tokens: int = 64, method: str = "full", cache_config=None) -> TargetRun:
    """Greedy generation from the whole prompt (the baseline); ``method``/``cache_config`` as in ``generate``."""
    ids = list(tokenizer(prompt_text).input_ids)
    return run_target(model, tokenizer, ids, None, max_new_tokens, method, cache_config)


def generate_specprefill(
    model,
    tokenizer,
    prompt_text: str,
    config: SpecPrefillConfig,
    *,
    protect: list[Span] | None = None,
    max_new_tokens: int = 64,
    method: str = "full",
    cache_config=None,
    draft=None,
    scores: DraftScores | None = None,
) -> TargetRun:
    """Compress the prompt with the draft (:func:`compress_prompt`), then generate greedily with the target.

    With the full cache and a shared tokenizer the kept tokens keep their original position ids; with a
    compressed cache on the target (``method`` snapstream/streamingllm/snapkv and a ``cache_config``) the kept
    tokens go through ``snapeval.generate`` at contiguous positions.
    """
    compressed = compress_prompt(prompt_text, tokenizer, config, protect, draft=draft, scores=scores)
    position_ids = compressed.position_ids if _uncompressed(method, cache_config) else None
    run = run_target(model, tokenizer, compressed.target_ids, position_ids, max_new_tokens, method, cache_config)
    run.ttft_seconds = compressed.draft_seconds + run.prefill_seconds
    run.compressed = compressed
    return run
