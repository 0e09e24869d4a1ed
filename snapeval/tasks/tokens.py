"""The tokenizer interface the tasks need: any object with ``encode``/``decode`` (a ``transformers`` tokenizer, a
``tokenizers.Tokenizer`` whose ``encode`` returns an object with ``.ids``, or a test double)."""
from __future__ import annotations

from typing import Any, Protocol, Sequence


class Tokenizer(Protocol):
    def encode(self, text: str, *args: Any, **kwargs: Any) -> Any: ...
    def decode(self, ids: Sequence[int], *args: Any, **kwargs: Any) -> str: ...


def token_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """Ids of ``text`` without special tokens (HF ``add_special_tokens=False`` where the tokenizer takes it)."""
    try:
        out = tokenizer.encode(text, add_special_tokens=False)
    except TypeError:
        out = tokenizer.encode(text)
    return list(getattr(out, "ids", out))


def token_ids_with_specials(tokenizer: Tokenizer, text: str) -> list[int]:
    """Ids of ``text`` as ``tokenizer.encode(text)`` gives them by default: with the special tokens the tokenizer adds
    (a Llama-3 BOS; none for a tokenizer that adds none)."""
    out = tokenizer.encode(text)
    return list(getattr(out, "ids", out))


def count_tokens(tokenizer: Tokenizer, text: str) -> int:
    return len(token_ids(tokenizer, text))


def decode(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """Text of ``ids`` with special tokens skipped where the tokenizer supports it."""
    try:
        return tokenizer.decode(list(ids), skip_special_tokens=True)
    except TypeError:
        return tokenizer.decode(list(ids))
