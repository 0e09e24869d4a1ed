"""Which prompt tokens the target receives: top chunks (or tokens) by draft importance, protected spans always.

Protected character spans (the question, the chat/instruction scaffolding) are never dropped: every draft token
overlapping one is kept, as is every token with an empty character span (BOS and other inserted special tokens).
"""
from __future__ import annotations

import math
import re

import torch

Span = tuple[int, int]


def protected_tokens(offsets: list[Span], protect: list[Span] | None) -> torch.Tensor:
    """bool ``[T]``: tokens overlapping a protected character span, or with an empty span (inserted specials)."""
    mask = torch.tensor([start >= end for start, end in offsets], dtype=torch.bool)
    for lo, hi in merge_spans(protect or []):
        mask |= torch.tensor([start < hi and end > lo for start, end in offsets], dtype=torch.bool)
    return mask


def select_tokens(scores: torch.Tensor | None, keep: float, chunk: int, protected: torch.Tensor | None = None) -> torch.Tensor:
    """bool ``[T]`` keep-mask: protected tokens, then the best chunks until ``ceil(keep * T)`` tokens are kept.

    Chunks are consecutive runs of ``chunk`` tokens (``chunk=1``: single tokens), scored by the mean importance of
    their unprotected tokens and kept whole, so the kept count exceeds ``ceil(keep * T)`` by less than ``chunk``
    (or is the protected count, if that is larger). Ties go to the earlier chunk.

    Args:
        scores: float ``[T]`` importance (None only with ``keep == 1``).
        keep: fraction in (0, 1].
        chunk: chunk length in tokens, >= 1.
        protected: bool ``[T]``, tokens that must be kept.
    """
    if scores is None:
        if keep < 1.0:
            raise ValueError("select_tokens: scores are required when keep < 1")
        return torch.ones(protected.numel() if protected is not None else 0, dtype=torch.bool)
    length = scores.numel()
    kept = torch.zeros(length, dtype=torch.bool) if protected is None else protected.clone()
    if keep >= 1.0:
        return torch.ones(length, dtype=torch.bool)
    budget = math.ceil(keep * length)
    free = ~kept
    starts = list(range(0, length, chunk))
    chunk_scores = []
    for start in starts:
        piece_free = free[start : start + chunk]
        if piece_free.any():
            chunk_scores.append((float(scores[start : start + chunk][piece_free].float().mean()), start))
    chunk_scores.sort(key=lambda item: (-item[0], item[1]))
    count = int(kept.sum())
    for _, start in chunk_scores:
        if count >= budget:
            break
        piece_free = free[start : start + chunk]
        kept[start : start + chunk] |= piece_free
        count += int(piece_free.sum())
    return kept


def merge_spans(spans: list[Span]) -> list[Span]:
    """Sorted, non-overlapping, non-touching character spans (empty spans dropped)."""
    merged: list[list[int]] = []
    for lo, hi in sorted((int(a), int(b)) for a, b in spans if b > a):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


def default_protected_spans(text: str, special_tokens: list[str] = ()) -> list[Span]:
    """Spans to keep when the caller names none: the chat/instruction scaffolding and the final question.

    - every occurrence of a special-token string (``<|im_start|>``, ``<start_of_turn>``, ...) through the end of its
      line, e.g. ``<|im_start|>user\n``; the trailing run of such markers (``<|im_end|>\n<|im_start|>assistant\n``)
      and everything after it;
    - the last paragraph (after the last blank line) of the body before that trailing run, which in lm-eval and
      LongBench prompts holds the question and the answer format; if that paragraph is more than half the prompt,
      only its last line.
    """
    spans: list[Span] = []
    body_end = len(text)
    markers = sorted({t for t in special_tokens if t and len(t) > 1 and t.strip()}, key=len, reverse=True)
    found = []
    if markers:
        pattern = re.compile("(?:" + "|".join(re.escape(m) for m in markers) + ")[^\n]*\n?")
        found = list(pattern.finditer(text))
        spans.extend(m.span() for m in found)
    if found and not text[found[-1].end() :].strip():
        first = len(found) - 1
        while first > 0 and not text[found[first - 1].end() : found[first].start()].strip():
            first -= 1
        body_end = found[first].start()
        spans.append((body_end, len(text)))
    body = text[:body_end].rstrip()
    cut = body.rfind("\n\n")
    start = cut + 2 if cut >= 0 else 0
    if len(body) - start > len(text) / 2:
        line = body.rfind("\n")
        start = line + 1 if line >= 0 else 0
    spans.append((start, body_end))
    return merge_spans(spans)
