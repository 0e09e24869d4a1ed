"""Thinking sections of reasoning models (DeepSeek-R1 style ``<think> ... </think> answer``)."""
from __future__ import annotations

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def split_thinking(text: str, *, assume_thinking: bool = False) -> tuple[str, str, bool]:
    """Split a generation into ``(thinking, answer, truncated_in_thinking)``.

    - ``"<think>a</think>b"`` (or ``"a</think>b"``, when the chat template opened the section in the prompt) gives
      ``("a", "b", False)``; the *last* ``</think>`` closes the section.
    - ``"<think>a"`` with no closing tag: the generation was cut off while thinking: ``("a", "", True)``.
    - No tags: ``("", text, False)``, unless ``assume_thinking`` (a reasoning model whose template opened the
      section in the prompt), in which case the whole text is unfinished thinking: ``(text, "", True)``.

    Answer extraction must only ever look at ``answer``: a number in the thinking is not an answer.
    """
    if THINK_CLOSE in text:
        thinking, _, answer = text.rpartition(THINK_CLOSE)
        start = thinking.find(THINK_OPEN)
        if start >= 0:
            thinking = thinking[start + len(THINK_OPEN):]
        return thinking.strip(), answer.strip(), False
    start = text.find(THINK_OPEN)
    if start >= 0:
        return text[start + len(THINK_OPEN):].strip(), "", True
    if assume_thinking:
        return text.strip(), "", True
    return "", text.strip(), False
