"""From kept draft tokens to the target's prompt.

- Same tokenizer: the kept token ids themselves, each with its original position id.
- Different tokenizers (cross-family): runs of kept draft tokens become character spans of the prompt text (the
  fast tokenizer's offset mapping), protected spans are added whole, and the target prompt is the concatenation of
  those spans, tokenized by the target's tokenizer.
"""
from __future__ import annotations

import hashlib

import torch

from snapeval.specprefill.selection import Span, merge_spans

_FINGERPRINT = "_snapeval_vocab_fingerprint"


def vocab_fingerprint(tokenizer) -> str:
    """A hash of a tokenizer's class, vocabulary and special-token handling (cached on the tokenizer object)."""
    cached = getattr(tokenizer, _FINGERPRINT, None)
    if cached is not None:
        return cached
    digest = hashlib.sha256(type(tokenizer).__name__.encode())
    for token, idx in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
        digest.update(f"{idx}\t{token}\n".encode())
    probe = "Hello world.\n\n  x\t<|im_start|><bos>"
    digest.update(repr(tokenizer(probe).input_ids).encode())
    value = digest.hexdigest()
    try:
        setattr(tokenizer, _FINGERPRINT, value)
    except AttributeError:
        pass
    return value


def same_tokenizer(a, b) -> bool:
    """Whether two tokenizers encode identically (same object, or same vocabulary and special-token handling)."""
    return a is b or (len(a) == len(b) and vocab_fingerprint(a) == vocab_fingerprint(b))


def kept_spans(offsets: list[Span], kept: torch.Tensor, protect: list[Span] | None = None) -> list[Span]:
    """Character spans of the kept draft tokens (runs merged) united with the protected spans, in text order.

    Args:
        offsets: ``(start, end)`` character offsets per draft token (empty for inserted special tokens).
        kept: bool ``[T]`` keep-mask over the draft tokens.
        protect: character spans that are kept whole whatever the token boundaries.
    """
    spans: list[Span] = list(protect or [])
    run: list[int] | None = None
    for (start, end), keep in zip(offsets, kept.tolist()):
        if end <= start:
            continue
        if keep:
            if run is None:
                run = [start, end]
            else:
                run[1] = max(run[1], end)
        elif run is not None:
            spans.append((run[0], run[1]))
            run = None
    if run is not None:
        spans.append((run[0], run[1]))
    return merge_spans(spans)


def spans_text(text: str, spans: list[Span]) -> str:
    """The prompt text restricted to ``spans`` (concatenated in order, nothing inserted)."""
    return "".join(text[lo:hi] for lo, hi in spans)
