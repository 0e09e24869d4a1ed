"""LongBench-v2 (THUDM/LongBench-v2): generative four-choice QA over long documents, official protocol.

Prompts are the official ``prompts/0shot*.txt`` templates of THUDM/LongBench (pred.py); over-long prompts are cut in
the middle at the token level (first half and last half of the allowed count) as pred.py does; answers are extracted
with pred.py's regular expressions. Accuracy is reported overall and by difficulty, length and domain, and an
unparsable answer counts as wrong and is counted separately.
"""
from __future__ import annotations

import os
import re
from snapeval.errors import SnapevalError
from snapeval.tasks.data import DatasetSpec, LoadedData, Schema, load_dataset_rows
from snapeval.tasks.families import TaskFamily
from snapeval.tasks.metrics import breakdown
from snapeval.tasks.reasoning import split_thinking
from snapeval.tasks.tokens import Tokenizer, decode, token_ids

SCHEMA = Schema({
    "_id": (str,), "domain": (str,), "sub_domain": (str,), "difficulty": (str,), "length": (str,),
    "question": (str,), "choice_A": (str,), "choice_B": (str,), "choice_C": (str,), "choice_D": (str,),
    "answer": (str,), "context": (str,),
})
SPEC = DatasetSpec("longbench_v2", "THUDM/LongBench-v2", "train", ("longbench_v2/longbench_v2.jsonl",), SCHEMA)
#: The task family this folder is (snapeval.tasks.families): its tasks' prefix, its data and the mean (prompt,
#: generated) tokens per sample of DeepSeek-R1-0528 with SnapStream (arXiv 2511.03092, Table 3; restated in
#: shared/reference/benchmarks.md), which the SN40L pricing of a results row deploys.
FAMILY = TaskFamily("longbench_v2", data=SPEC, typical_lengths=(84_762, 1_296),
                    hooks="snapeval.tasks.longbench.hooks",
                    reference_reply=lambda doc: f"The correct answer is ({doc['answer']})")

DIFFICULTIES = ("easy", "hard")
LENGTHS = ("short", "medium", "long")
DOMAINS = (
    "Single-Document QA", "Multi-Document QA", "Long In-context Learning",
    "Long-dialogue History Understanding", "Code Repository Understanding", "Long Structured Data Understanding",
)
CHOICES = ("A", "B", "C", "D")

# THUDM/LongBench prompts/0shot.txt, 0shot_cot.txt and 0shot_cot_ans.txt (note the typographic apostrophe).
TEMPLATE_0SHOT = (
    "Please read the following text and answer the question below.\n\n<text>\n$DOC$\n</text>\n\n"
    "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\n"
    'Format your response as follows: "The correct answer is (insert answer here)".'
)
TEMPLATE_0SHOT_COT = (
    "Please read the following text and answer the questions below.\n\n<text>\n$DOC$\n</text>\n\n"
    "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\n"
    "Let\u2019s think step by step:"
)
TEMPLATE_0SHOT_COT_ANS = (
    "Please read the following text and answer the questions below.\n\nThe text is too long and omitted here.\n\n"
    "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\n"
    "Let\u2019s think step by step: $COT$\n\n"
    "Based on the above, what is the single, most likely answer choice? "
    'Format your response as follows: "The correct answer is (insert answer here)".'
)
#: Generation budgets of pred.py: 128 new tokens for the answer, 1024 for the chain of thought.
MAX_NEW_TOKENS = 128
MAX_NEW_TOKENS_COT = 1024

_ANSWER_RES = (re.compile(r"The correct answer is \(([A-D])\)"), re.compile(r"The correct answer is ([A-D])"))


def load(data_dir: str | os.PathLike | None = None) -> LoadedData:
    """All validated rows (hub ``THUDM/LongBench-v2`` or ``<data_dir>/longbench_v2/longbench_v2.jsonl``)."""
    data = load_dataset_rows(SPEC, data_dir)
    for i, row in enumerate(data.rows, start=1):
        for fld, allowed in (("difficulty", DIFFICULTIES), ("length", LENGTHS), ("answer", CHOICES)):
            if row[fld] not in allowed:
                raise SnapevalError(f"{data.source}:{i}: field {fld!r}={row[fld]!r} is not one of {', '.join(allowed)}")
    return data


def fill(template: str, doc: dict, cot: str | None = None) -> str:
    """Fill an official template exactly as pred.py does (every field stripped)."""
    out = template.replace("$DOC$", doc["context"].strip()).replace("$Q$", doc["question"].strip())
    for c in CHOICES:
        out = out.replace(f"$C_{c}$", doc[f"choice_{c}"].strip())
    if cot is not None:
        out = out.replace("$COT$", cot)
    return out


def build_prompt(doc: dict, *, cot: bool = False) -> str:
    """The zero-shot prompt (``cot=False``) or the first pass of the chain of thought (``cot=True``)."""
    return fill(TEMPLATE_0SHOT_COT if cot else TEMPLATE_0SHOT, doc)


def build_cot_answer_prompt(doc: dict, cot: str) -> str:
    """The official second pass of the chain of thought: no document, the first pass's reasoning (stripped, as
    pred.py strips the reply before it fills ``$COT$``)."""
    return fill(TEMPLATE_0SHOT_COT_ANS, doc, cot=cot.strip())


def truncate_middle(prompt: str, tokenizer: Tokenizer, max_tokens: int) -> tuple[str, int, bool]:
    """Cut ``prompt`` in the middle to at most ``max_tokens`` tokens, as pred.py does.

    Keeps ``ids[:max_tokens//2] + ids[-max_tokens//2:]`` and decodes with special tokens skipped.
    Returns ``(prompt, original_token_count, truncated)``.
    """
    if max_tokens < 2:
        raise SnapevalError(f"max_input_tokens={max_tokens} is too small; it must be at least 2")
    ids = token_ids(tokenizer, prompt)
    if len(ids) <= max_tokens:
        return prompt, len(ids), False
    half = max_tokens // 2
    return decode(tokenizer, ids[:half] + ids[-half:]), len(ids), True


def extract_answer(response: str) -> str | None:
    """pred.py's extraction: drop ``*``, then ``The correct answer is (X)``, then ``The correct answer is X``."""
    response = response.replace("*", "")
    for pattern in _ANSWER_RES:
        match = pattern.search(response)
        if match:
            return match.group(1)
    return None


def score(doc: dict, response: str, *, assume_thinking: bool = False) -> dict[str, float | None]:
    """Per-doc metrics: ``acc``, ``unparsable``, ``truncated_in_thinking`` and the ``acc_<group>`` breakdown.

    The thinking section of a reasoning model is removed before extraction; a generation cut off inside it has no
    answer (unparsable, wrong).
    """
    _, answer_text, cut = split_thinking(response, assume_thinking=assume_thinking)
    pred = extract_answer(answer_text)
    correct = float(pred is not None and pred == doc["answer"])
    out: dict[str, float | None] = {
        "acc": correct,
        "unparsable": float(pred is None),
        "truncated_in_thinking": float(cut),
    }
    out.update(breakdown(correct, {"difficulty": doc["difficulty"], "length": doc["length"], "domain": doc["domain"]},
                         {"difficulty": DIFFICULTIES, "length": LENGTHS, "domain": DOMAINS}))
    return out
