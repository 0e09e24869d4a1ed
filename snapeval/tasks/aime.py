"""AIME 2024 (Maxwell-Jia/AIME_2024): 30 problems with integer answers 0-999, reasoning-model protocol.

The prompt is the DeepSeek-R1 model cards' instruction (sent through the chat template by the harness); the answer
is the content of the last ``\\boxed{}`` of the text after the thinking section, compared as an integer. Greedy
pass@1 by default; with ``n`` samples, pass@1 averaged over the samples (and unbiased pass@k).
"""
from __future__ import annotations

import os
import re

from snapeval.errors import SnapevalError
from snapeval.tasks.data import DatasetSpec, LoadedData, Schema, load_dataset_rows
from snapeval.tasks.metrics import pass_at_k
from snapeval.tasks.reasoning import split_thinking

SCHEMA = Schema({"ID": (str,), "Problem": (str,), "Solution": (str,), "Answer": (int, str)})
SPEC = DatasetSpec("aime24", "Maxwell-Jia/AIME_2024", "train", ("aime24/aime_2024.jsonl",), SCHEMA)

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
#: DeepSeek-R1 model cards: temperature 0.6, top-p 0.95 for sampled (averaged) pass@1.
SAMPLING = {"temperature": 0.6, "top_p": 0.95}


def load(data_dir: str | os.PathLike | None = None) -> LoadedData:
    """All validated rows (hub ``Maxwell-Jia/AIME_2024`` or ``<data_dir>/aime24/aime_2024.jsonl``)."""
    data = load_dataset_rows(SPEC, data_dir)
    for where, row in zip(data.where, data.rows):
        if parse_integer(str(row["Answer"])) is None:
            raise SnapevalError(f"{where}: field 'Answer'={row['Answer']!r} is not an integer")
    return data


def build_prompt(doc: dict) -> str:
    """``<problem>\\nPlease reason step by step, and put your final answer within \\boxed{}.``"""
    return f"{doc['Problem'].strip()}\n{INSTRUCTION}"


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced braces) or ``\\boxed x``; ``None`` when there is none."""
    idx = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if idx < 0:
        return None
    rest = text[idx:]
    rest = rest[len("\\boxed"):] if rest.startswith("\\boxed") else rest[len("\\fbox"):]
    if rest.startswith(" "):
        token = rest.strip().split()
        return token[0].rstrip("$.,") if token else None
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, ch in enumerate(rest):
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0:
            return rest[1:i]
    return None  # unbalanced: the generation stopped inside the box


_INT_RE = re.compile(r"^[-+]?\d+$")


def parse_integer(text: str) -> int | None:
    """An integer from a boxed answer: tolerates ``$``, spaces, thousands commas, ``\\text{}``/``^\\circ`` and a
    trailing ``.0``; anything else (``\\frac``, ``x=5``, words) is unparsable."""
    s = text.strip().strip("$").strip()
    s = re.sub(r"\\text\{([^}]*)\}", r"\1", s)
    s = s.replace("^\\circ", "").replace("^{\\circ}", "").replace("\\!", "").replace("{,}", "").replace(",", "")
    s = s.replace(" ", "")
    if s.endswith(".0"):
        s = s[:-2]
    if s.startswith("{") and s.endswith("}"):
        s = s[1:-1]
    return int(s) if _INT_RE.match(s) else None


def extract_answer(response: str, *, assume_thinking: bool = False) -> tuple[int | None, bool]:
    """``(integer or None, truncated_in_thinking)`` from one generation."""
    _, answer_text, cut = split_thinking(response, assume_thinking=assume_thinking)
    boxed = last_boxed(answer_text)
    return (parse_integer(boxed) if boxed is not None else None), cut


def score(doc: dict, responses: list[str], *, assume_thinking: bool = False, k: int | None = None) -> dict[str, float]:
    """Per-problem metrics over ``n = len(responses)`` generations.

    ``exact_match``: the first generation (greedy pass@1); ``pass@1_avg``: mean correctness over all ``n``;
    ``pass@k`` (when ``k`` given and ``k <= n``); ``unparsable`` and ``truncated_in_thinking``: fractions of the
    ``n`` generations.
    """
    target = int(str(doc["Answer"]).strip())
    parsed = [extract_answer(r, assume_thinking=assume_thinking) for r in responses]
    correct = [value is not None and value == target for value, _ in parsed]
    n = len(responses)
    out = {
        "exact_match": float(correct[0]),
        "pass@1_avg": sum(correct) / n,
        "unparsable": sum(value is None for value, _ in parsed) / n,
        "truncated_in_thinking": sum(cut for _, cut in parsed) / n,
    }
    if k is not None and k <= n:
        out[f"pass@{k}"] = pass_at_k(n, sum(correct), k)
    return out
