"""Text -> prompt ids, as the model's own tokenizer files say: its BOS exactly once.

lm-eval's Hugging Face model encodes a context with the tokenizer's own special tokens (Llama 3 and the R1
distills prepend their BOS; SmolLM2 adds none) unless the text already starts with the BOS string, which a chat
template writes itself (``{{ bos_token }}``): then it adds nothing (``HFLM.tok_encode`` with ``has_bos_prefix``).
Every snapeval path that encodes a text prompt (``generate``, the engine, ``snapeval demo``) follows the same rule,
so a prompt holds one BOS with and without the chat template, token for token as lm-eval builds it.
"""
from __future__ import annotations


def starts_with_bos(tokenizer, text: str) -> bool:
    """Whether ``text`` already opens with the tokenizer's BOS string (a rendered chat template)."""
    bos = getattr(tokenizer, "bos_token", None)
    return bool(bos) and text.startswith(bos)


def encode_prompt(tokenizer, text: str) -> list[int]:
    """``text``'s ids with the tokenizer's own special tokens, none added where ``text`` starts with the BOS."""
    add = not starts_with_bos(tokenizer, text)
    return list(tokenizer(text, add_special_tokens=add).input_ids)
